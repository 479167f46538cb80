"""Output throughput with at most C requests in flight, as ``vllm bench serve --max-concurrency C`` measures it.

Every prompt is sent greedy, ``max_tokens`` each, by a client that keeps at most C requests in flight: C at first,
then the next as each one finishes (on a server a pool of C concurrent HTTP requests; offline the engine's own
request queue, fed the same way: ``add_request`` and ``step``). A pass records each request's output tokens and
latency (sent to answered) and its wall time (the first sent to the last answered), and, with a draft, the
spec-decode counters' change over the pass.

**Output tokens per second** is the pass's tokens over its wall time. Its 95% interval is that rate times
``exp(±t·se)``, where ``se`` is the relative standard error of the requests' tokens over their latencies, prompts
as clusters (each request's influence ``n_i/N - l_i/L``, Student's t on prompts - 1 degrees of freedom): the pass's
own spread, not the machine's between passes. The **speed-up at C** is a draft's rate over the target alone's at
the same C, paired by prompt on the log scale (influence ``n_di/N_d - l_di/L_d - n_ai/N_a + l_ai/L_a``), as
:func:`~eaglequant.measurement.statistics.speedup` pairs the decode rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eaglequant.common.json_fields import JsonRecord
from eaglequant.measurement.statistics import Interval, t_quantile

MAX_CONCURRENCY = 1024


@dataclass(frozen=True)
class ConcurrentPass(JsonRecord):
    """Every prompt sent with at most ``concurrency`` in flight: per request (in prompt order) its output tokens and
    latency in seconds; the pass's wall time; with a draft, the drafts and accepted tokens it made (None without)."""

    json_computed = ("output_tokens_per_second", "acceptance_length")

    concurrency: int
    tokens: tuple[int, ...]
    latencies: tuple[float, ...]
    wall_seconds: float
    drafts: int | None = None
    accepted: int | None = None

    @property
    def timed(self) -> bool:
        return self.wall_seconds > 0 and sum(self.tokens) > 0 and all(s > 0 for s in self.latencies)

    def output_tokens_per_second(self) -> Interval:
        """The pass's output tokens over its wall time, with its 95% interval (NaN where it was not timed)."""
        if not self.timed:
            return Interval(math.nan, math.nan, math.nan)
        rate = sum(self.tokens) / self.wall_seconds
        return _scaled(rate, _influences(self), len(self.tokens))

    def acceptance_length(self) -> float | None:
        """1 + accepted tokens per draft over the pass (None: no draft, or none made)."""
        if not self.drafts or self.accepted is None:
            return None
        return round(1 + self.accepted / self.drafts, 5)


def merged(passes: Sequence[ConcurrentPass]) -> ConcurrentPass:
    """The target alone's passes at one C as one: each prompt's tokens and latencies summed, the wall times summed."""
    first = passes[0]
    return ConcurrentPass(
        first.concurrency,
        tuple(sum(n) for n in zip(*(p.tokens for p in passes), strict=True)),
        tuple(sum(s) for s in zip(*(p.latencies for p in passes), strict=True)),
        sum(p.wall_seconds for p in passes),
    )


def concurrent_speedup(drafted: ConcurrentPass, alone: ConcurrentPass) -> Interval:
    """The drafted pass's output tokens per second over the target alone's at the same C, paired by prompt, with its
    95% interval (NaN where either was not timed, or they ran different prompts)."""
    if not (drafted.timed and alone.timed) or len(drafted.tokens) != len(alone.tokens):
        return Interval(math.nan, math.nan, math.nan)
    ratio = (sum(drafted.tokens) / drafted.wall_seconds) / (sum(alone.tokens) / alone.wall_seconds)
    paired = [d - a for d, a in zip(_influences(drafted), _influences(alone), strict=True)]
    return _scaled(ratio, paired, len(paired))


def _influences(run: ConcurrentPass) -> list[float]:
    total_n, total_l = sum(run.tokens), sum(run.latencies)
    return [n / total_n - s / total_l for n, s in zip(run.tokens, run.latencies, strict=True)]


def _scaled(value: float, influences: Sequence[float], m: int) -> Interval:
    """``value`` with the interval ``exp(±t·se)`` around it, ``se`` from per-prompt influences on the log scale."""
    if m < 2:
        return Interval(value, -math.inf, math.inf)
    se = math.sqrt(m / (m - 1) * sum(e * e for e in influences))
    spread = math.exp(t_quantile(m - 1) * se)
    return Interval(value, value / spread, value * spread)
