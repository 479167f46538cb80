"""vLLM's spec-decode counters as a server exposes them on ``/metrics``, and what one request may move them by.

vLLM (``v1/spec_decode/metrics.py``, ``SpecDecodingProm``) registers four Prometheus counters when it serves a
draft: ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and
``..._num_accepted_tokens_per_pos`` (with a ``position`` label, 0 to k - 1), each labelled by ``model_name``
and ``engine``; the text exposition adds ``_total`` to a counter's name (and a ``_created`` series, ignored
here). A server that serves no draft has none of them. Series of several engines (data parallel) are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "vllm:spec_decode_"
_TOTALS = {
    f"{PREFIX}num_drafts_total": "drafts",
    f"{PREFIX}num_draft_tokens_total": "draft_tokens",
    f"{PREFIX}num_accepted_tokens_total": "accepted",
}
PER_POSITION = f"{PREFIX}num_accepted_tokens_per_pos_total"


class MetricsFormatError(ValueError):
    """A /metrics line that is not Prometheus text where a spec-decode counter was expected."""


@dataclass(frozen=True)
class SpecCounters:
    """The server's spec-decode counters at one moment (or their change between two)."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]

    def minus(self, before: SpecCounters) -> SpecCounters:
        positions = max(len(self.accepted_per_position), len(before.accepted_per_position))
        mine, theirs = _padded(self.accepted_per_position, positions), _padded(before.accepted_per_position, positions)
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            tuple(a - b for a, b in zip(mine, theirs, strict=True)),
        )

    @property
    def moved(self) -> bool:
        return bool(self.drafts or self.draft_tokens or self.accepted or any(self.accepted_per_position))


def _padded(values: tuple[int, ...], length: int) -> tuple[int, ...]:
    return values + (0,) * (length - len(values))


def _count(value: float, line: str) -> int:
    if not value >= 0 or value != int(value):
        raise MetricsFormatError(line)
    return int(value)


def parse_spec_counters(text: str) -> SpecCounters | None:
    """The spec-decode counters in a /metrics page (Prometheus text, read by ``prometheus_client``'s own parser),
    summed over engines; None when the page has none (the server serves no draft). Only the spec-decode samples are
    read: the rest of the page is the server's business."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = [line for line in text.splitlines() if line.startswith(PREFIX)]
    totals = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_position: dict[int, int] = {}
    seen = False
    for line in lines:
        try:
            (sample,) = (s for family in text_string_to_metric_families(line + "\n") for s in family.samples)
        except ValueError:
            raise MetricsFormatError(line) from None
        seen = seen or sample.name in (*_TOTALS, PER_POSITION)
        if sample.name in _TOTALS:
            totals[_TOTALS[sample.name]] += _count(sample.value, line)
        elif sample.name == PER_POSITION:
            position = sample.labels.get("position", "")
            if not position.isdigit():
                raise MetricsFormatError(line)
            per_position[int(position)] = per_position.get(int(position), 0) + _count(sample.value, line)
    if not seen:
        return None
    positions = tuple(per_position.get(j, 0) for j in range(max(per_position, default=-1) + 1))
    return SpecCounters(totals["drafts"], totals["draft_tokens"], totals["accepted"], positions)


def one_request_problem(delta: SpecCounters, k: int, generated: int) -> str | None:
    """Why ``delta`` cannot be the counters of one request that generated ``generated`` tokens drafting ``k``
    at a time (None: it can). One request's verification steps each score k drafted tokens and emit the
    accepted ones and one more; so its drafts and accepted tokens emit at most the tokens it generated after the
    first (the prefill's), plus the at most k accepted past ``max_tokens`` in its last step."""
    per_position = delta.accepted_per_position
    if min(delta.drafts, delta.draft_tokens, delta.accepted, *per_position, 0) < 0:
        return "a counter went down (the server restarted?)"
    if delta.draft_tokens != delta.drafts * k:
        return f"{delta.draft_tokens} draft tokens in {delta.drafts} drafts, not {k} each"
    if len(per_position) != k or sum(per_position) != delta.accepted:
        return f"accepted per position {list(per_position)} does not add up to {delta.accepted} over {k} positions"
    if any(later > earlier for earlier, later in zip((delta.drafts, *per_position), per_position, strict=False)):
        return f"accepted per position {list(per_position)} rises along the draft, or passes {delta.drafts} drafts"
    emitted = delta.drafts + delta.accepted
    if emitted > max(generated - 1, 0) + k:
        return f"{delta.drafts} drafts and {delta.accepted} accepted tokens emit {emitted}, for {generated} generated"
    return None


# vLLM's per-request histograms (``v1/metrics/loggers.py``), observed as each request finishes: its decode time
# (``last_token_ts - first_token_ts``, the engine core's timestamps) and its generated tokens; read by their
# ``_sum`` and ``_count`` series, summed over engines, to time one request's decode by the server's own clock.
DECODE_SECONDS = "vllm:request_decode_time_seconds"
GENERATION_TOKENS = "vllm:request_generation_tokens"
_DECODE_SERIES = {
    f"{DECODE_SECONDS}_sum": "seconds",
    f"{DECODE_SECONDS}_count": "requests",
    f"{GENERATION_TOKENS}_sum": "tokens",
}


@dataclass(frozen=True)
class DecodeTotals:
    """The server's decode histograms at one moment (or their change between two): the decode seconds and the
    generated tokens of the requests finished, and how many finished."""

    seconds: float
    tokens: int
    requests: int

    def minus(self, before: DecodeTotals) -> DecodeTotals:
        return DecodeTotals(self.seconds - before.seconds, self.tokens - before.tokens, self.requests - before.requests)

    @property
    def decode_tokens(self) -> int:
        """The tokens of the decode phase: each request's first token comes from its prefill."""
        return self.tokens - self.requests


def parse_decode_totals(text: str) -> DecodeTotals | None:
    """The decode histograms' totals in a /metrics page, summed over engines; None when the page lacks one (a
    server that does not expose them, or an older vLLM)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = {"seconds": 0.0, "requests": 0.0, "tokens": 0.0}
    seen = set()
    for line in text.splitlines():
        name = line.partition("{")[0].partition(" ")[0]
        if name not in _DECODE_SERIES:
            continue
        try:
            (sample,) = (s for family in text_string_to_metric_families(line + "\n") for s in family.samples)
        except ValueError:
            raise MetricsFormatError(line) from None
        totals[_DECODE_SERIES[name]] += sample.value
        seen.add(name)
    if len(seen) < len(_DECODE_SERIES):
        return None
    return DecodeTotals(
        totals["seconds"], _count(totals["tokens"], "generation tokens"), _count(totals["requests"], "requests")
    )
