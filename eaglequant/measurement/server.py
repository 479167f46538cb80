"""Acceptance measured on a running OpenAI-compatible vLLM server: its spec-decode counters on ``/metrics``
read around each of eaglequant's requests.

The prompts are sent one at a time (``/v1/completions``: greedy or sampled, ``ignore_eos``, ``max_tokens``, the
token ids and, greedy, the top two log-probabilities for the near-tie check), and the counters are read before
and after each; the difference is that prompt's figures, as the offline run reads ``LLM.get_metrics()``. Each
prompt's decode is timed the same way, by the server's own decode histograms (``vllm:request_decode_time_seconds``
and ``vllm:request_generation_tokens``) where it exposes them, else by the client's wall time around the request.
The server must be eaglequant's alone while it measures: counters that move between two reads with no request in
flight, or by more than one request can, are refused, as is a server that serves no draft.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, suggested, words
from eaglequant.measurement.concurrency import ConcurrentPass
from eaglequant.measurement.measure import GREEDY, EngineRun, Mode, Settings
from eaglequant.measurement.spec_counters import (
    DecodeTotals,
    MetricsFormatError,
    SpecCounters,
    one_request_problem,
    parse_decode_totals,
    parse_spec_counters,
)
from eaglequant.measurement.statistics import PromptCounts

REQUEST_TIMEOUT_S = 900.0  # one prompt's generation
READ_TIMEOUT_S = 30.0  # /metrics, /v1/models, /version
QUIET_S = 0.25  # two reads this far apart with no request in flight must agree
SETTLE_READS = 8  # reads after a response until two agree (the counters are recorded as the response is sent)


class ServerError(InputError):
    """The server cannot be measured: unreachable, not vLLM, no draft, or counters eaglequant did not move."""


@dataclass(frozen=True)
class Reading:
    """One read of a server's /metrics: its spec-decode counters and its decode histograms' totals (each None
    where the server has none)."""

    spec: SpecCounters | None
    decode: DecodeTotals | None


@dataclass(frozen=True)
class Server:
    """An OpenAI-compatible vLLM server at ``url`` (``http://host:port``), read with httpx."""

    url: str
    label: str

    def _open(self, path: str, body: dict[str, Any] | None = None, timeout: float = READ_TIMEOUT_S) -> bytes:
        import httpx

        address = self.url.rstrip("/") + path
        try:
            if body is None:
                response = httpx.get(address, timeout=timeout)
            else:
                response = httpx.post(address, json=body, timeout=timeout)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as error:
            raise ServerError(
                f"{self.label} ({self.url}): unreachable ({error or type(error).__name__})",
                hint="give the URL of a running vLLM server, e.g. http://127.0.0.1:8000",
            ) from None
        if response.is_error:
            detail = _error_detail(response.text)
            said = f": {detail}" if detail else ": not a vLLM server?"
            raise ServerError(f"{self.label} ({address}) answered {response.status_code}{said}")
        if "html" in response.headers.get("content-type", "").lower():
            page = f"{self.label} ({address}) answered {response.status_code} with a web page"
            raise ServerError(f"{page}: not a vLLM server?")
        return response.content

    def _json(self, path: str, body: dict[str, Any] | None = None, timeout: float = READ_TIMEOUT_S) -> Any:
        raw = self._open(path, body, timeout)
        try:
            return json.loads(raw)
        except ValueError:
            address = self.url.rstrip("/") + path
            raise ServerError(f"{self.label} ({address}) did not answer JSON: not a vLLM server?") from None

    def model(self) -> str:
        """The served model's id (the first /v1/models lists)."""
        listed = self._json("/v1/models")
        models = listed.get("data") if isinstance(listed, dict) else None
        if not models or not isinstance(models[0], dict) or "id" not in models[0]:
            raise ServerError(f"{self.label} ({self.url}): /v1/models lists no model")
        return str(models[0]["id"])

    def version(self) -> str:
        try:
            return str(self._json("/version").get("version", "unknown"))
        except (ServerError, AttributeError):
            return "unknown"

    def counters(self) -> SpecCounters | None:
        return self.reading().spec

    def reading(self) -> Reading:
        """The spec-decode counters and the decode histograms, from one read of /metrics."""
        page = self._open("/metrics").decode("utf-8", errors="replace")
        try:
            return Reading(parse_spec_counters(page), parse_decode_totals(page))
        except MetricsFormatError as error:
            raise ServerError(f"{self.label} ({self.url}): /metrics is not Prometheus text at: {error}") from None

    def complete(
        self, model: str, prompt: str, settings: Settings, mode: Mode, seed: int, gaps: bool = True
    ) -> dict[str, Any]:
        """One generation, as the offline run makes it; the choice's token ids and, greedy, top-2 gaps (unless
        ``gaps`` is False: a throughput pass asks for no log-probabilities)."""
        greedy = mode.temperature == 0.0 and gaps
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": settings.max_tokens,
            "temperature": mode.temperature,
            "seed": seed,
            "ignore_eos": True,  # vLLM's extra field: every prompt generates max_tokens
            "return_token_ids": True,
        }
        if greedy:
            body |= {"logprobs": 2, "return_tokens_as_token_ids": True}  # keys by id: no two tokens merge
        answer = self._json("/v1/completions", body, REQUEST_TIMEOUT_S)
        try:
            choice = answer["choices"][0]
            record: dict[str, Any] = {"token_ids": [int(t) for t in choice["token_ids"]]}
            if greedy:
                record["top2_gaps"] = [_top2_gap(top) for top in choice["logprobs"]["top_logprobs"]]
        except (KeyError, IndexError, TypeError, ValueError):
            raise ServerError(f"{self.label} ({self.url}): /v1/completions answered without token ids") from None
        return record


def _error_detail(text: str) -> str:
    """What a vLLM server says of an error in its JSON (``{"error": {"message": ...}}``, or FastAPI's ``{"detail":
    ...}``), on one line; "" for anything else (a web page from another server, say), which is shown as nothing."""
    try:
        answer = json.loads(text)
    except ValueError:
        return ""
    said = answer.get("error", answer.get("detail")) if isinstance(answer, dict) else None
    if isinstance(said, dict):
        said = said.get("message")
    return " ".join(str(said).split())[:300] if said else ""


def _top2_gap(top: dict[str, float] | None) -> float | None:
    values = sorted((float(v) for v in (top or {}).values()), reverse=True)
    return round(values[0] - values[1], 6) if len(values) > 1 else None


def measure_on_server(
    server: Server, settings: Settings, drafting: bool, prompt_done: Callable[[str], None] = lambda _: None
) -> EngineRun:
    """Every prompt of ``settings`` on ``server``, one at a time, in every mode (the target alone, ``drafting``
    False: greedy only), with the counters' change around each as its figures; ``prompt_done`` is told of each
    prompt as it is answered (``prompt 3/22, greedy``)."""
    started = time.monotonic()
    model = server.model()
    quiet = _quiet_reading(server)
    _check_drafting(server, quiet.spec, settings, drafting)
    last = quiet
    modes: dict[str, tuple[PromptCounts, ...]] = {}
    clocks: dict[str, str] = {}
    measured_modes = settings.modes if drafting else (GREEDY,)
    for mode in measured_modes:
        records: list[dict[str, Any]] = []
        by_server: list[tuple[int, float] | None] = []
        by_client: list[float] = []
        for index, prompt in enumerate(settings.prompts):
            before = server.reading()
            if before != last:
                raise _traffic(server, f"its counters moved with no request in flight, before prompt {index}")
            sent = time.monotonic()
            record = server.complete(model, prompt, settings, mode, mode.seed + index)
            by_client.append(time.monotonic() - sent)
            after = _settled(server)
            if drafting and after.spec is not None and before.spec is not None:
                record |= _prompt_figures(
                    server, after.spec.minus(before.spec), settings, len(record["token_ids"]), index
                )
            by_server.append(_server_decode(server, before, after, index))
            records.append(record)
            last = after
            in_mode = f", {mode.name}" if len(measured_modes) > 1 else ""
            prompt_done(f"prompt {index + 1}/{len(settings.prompts)}{in_mode}")
        clocks[mode.name] = timed(records, by_server, by_client)
        modes[mode.name] = tuple(PromptCounts.from_json(record) for record in records)
    passes = tuple(concurrent_pass(server, model, settings, c, drafting) for c in settings.concurrency)
    resolved = {"num_speculative_tokens": settings.draft_tokens, "server": server.url} if drafting else None
    seconds = round(time.monotonic() - started, 1)
    return EngineRun(server.version(), resolved, seconds, modes, clocks[GREEDY.name], passes)


def concurrent_pass(server: Server, model: str, settings: Settings, concurrency: int, drafting: bool) -> ConcurrentPass:
    """Every prompt greedy with at most ``concurrency`` requests in flight (a pool of that many connections, as
    ``vllm bench serve --max-concurrency`` sends them): each request's output tokens and latency, the pass's wall
    time, and with a draft the spec-decode counters' change over the pass (the server eaglequant's alone)."""
    from concurrent.futures import ThreadPoolExecutor

    before = _quiet_reading(server)

    def one(index: int, prompt: str) -> tuple[int, float]:
        sent = time.monotonic()
        record = server.complete(model, prompt, settings, GREEDY, GREEDY.seed + index, gaps=False)
        return len(record["token_ids"]), time.monotonic() - sent

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answered = list(pool.map(one, range(len(settings.prompts)), settings.prompts))
    wall = time.monotonic() - started
    after = _settled(server)
    drafts = accepted = None
    if drafting and before.spec is not None and after.spec is not None:
        delta = after.spec.minus(before.spec)
        drafts, accepted = delta.drafts, delta.accepted
    tokens, latencies = tuple(n for n, _ in answered), tuple(round(s, 6) for _, s in answered)
    return ConcurrentPass(concurrency, tokens, latencies, round(wall, 6), drafts, accepted)


def _server_decode(server: Server, before: Reading, after: Reading, index: int) -> tuple[int, float] | None:
    """One request's decode tokens and seconds by the server's histograms (None where it has none, or they did
    not record the request); more than one request finished is someone else's traffic."""
    if before.decode is None or after.decode is None:
        return None
    delta = after.decode.minus(before.decode)
    if delta.requests > 1:
        raise _traffic(server, f"prompt {index} finished {delta.requests} requests in its decode histograms")
    if delta.requests != 1 or delta.decode_tokens < 1 or delta.seconds <= 0:
        return None
    return delta.decode_tokens, delta.seconds


def timed(records: list[dict[str, Any]], by_server: list[tuple[int, float] | None], by_client: list[float]) -> str:
    """Put each prompt's decode tokens and seconds into its record, by one clock for the whole run (as the offline
    probe does): the server's ("engine") where it timed every prompt, else the client's wall time around each
    request over every generated token ("wall")."""
    clock = "engine" if all(t is not None for t in by_server) else "wall"
    for record, server_time, wall in zip(records, by_server, by_client, strict=True):
        tokens, seconds = (
            server_time if server_time is not None and clock == "engine" else (len(record["token_ids"]), wall)
        )
        record["decode_tokens"], record["decode_seconds"] = tokens, round(seconds, 6)
    return clock


def _quiet_reading(server: Server) -> Reading:
    first = server.reading()
    time.sleep(QUIET_S)
    second = server.reading()
    if first != second:
        raise _traffic(server, f"its counters moved in {QUIET_S} s with no request of eaglequant's in flight")
    return second


def _settled(server: Server) -> Reading:
    """The counters once two reads in a row agree (vLLM records a step's counters as it sends its output)."""
    previous = server.reading()
    for _ in range(SETTLE_READS):
        time.sleep(QUIET_S / 5)
        current = server.reading()
        if current == previous:
            return current
        previous = current
    raise _traffic(server, "its counters kept moving after eaglequant's request was answered")


def _check_drafting(server: Server, counters: SpecCounters | None, settings: Settings, drafting: bool) -> None:
    where = f"{server.label} ({server.url})"
    if not drafting and counters is not None:
        raise ServerError(
            f"{where} serves a draft (/metrics has vLLM's spec-decode counters): the reference is the target alone",
            hint="serve the target without --speculative-config for the greedy reference",
        )
    if drafting and counters is None:
        raise ServerError(
            f"{where} serves no draft: /metrics has no vllm:spec_decode_ counters",
            hint="""serve the target with --speculative-config '{"method": "eagle3", "model": DRAFT, ...}'""",
        )
    served_k = 0 if counters is None else len(counters.accepted_per_position)
    if drafting and served_k != settings.draft_tokens:
        raise ServerError(
            f"{where} drafts {served_k} tokens a round, not the {settings.draft_tokens} asked",
            hint=words("give ", suggested("draft_tokens", served_k), ", or serve the draft with that many"),
        )


def _prompt_figures(
    server: Server, delta: SpecCounters, settings: Settings, generated: int, index: int
) -> dict[str, Any]:
    if not delta.moved and generated > 1:
        raise ServerError(
            f"{server.label} ({server.url}) ran no draft on prompt {index}: its spec-decode counters did not move",
            hint="check the server's --speculative-config and that its draft loaded",
        )
    problem = one_request_problem(delta, settings.draft_tokens, generated)
    if problem is not None:
        raise _traffic(server, f"prompt {index} moved its counters more than one request can: {problem}")
    return {"drafts": delta.drafts, "accepted": delta.accepted, "accepted_per_position": delta.accepted_per_position}


def _traffic(server: Server, what: str) -> ServerError:
    return ServerError(
        f"{server.label} ({server.url}): {what}; its figures would not be eaglequant's",
        hint="measure on a server no one else sends requests to",
    )


def counters_over_window(server: Server, window_s: float, sleep: Callable[[float], None] = time.sleep) -> SpecCounters:
    """The spec-decode counters' change over ``window_s`` seconds of whatever traffic ``server`` serves (eaglequant
    sends nothing): refused when the server serves no draft, a counter went down, or no draft ran."""
    where = f"{server.label} ({server.url})"
    before = server.counters()
    if before is None:
        raise ServerError(
            f"{where} serves no draft: /metrics has no vllm:spec_decode_ counters",
            hint="""serve the target with --speculative-config '{"method": "eagle3", "model": DRAFT, ...}'""",
        )
    sleep(window_s)
    after = server.counters()
    delta = after.minus(before) if after is not None else None
    if delta is None or min(delta.drafts, delta.draft_tokens, delta.accepted, *delta.accepted_per_position) < 0:
        raise ServerError(f"{where}: its spec-decode counters went down in the window (the server restarted?)")
    if not delta.drafts:
        raise ServerError(
            f"{where}: no draft ran in the {window_s:g} s window (its spec-decode counters did not move)",
            hint="give a longer --window while the server serves requests, or leave out --window to send prompts",
        )
    return delta
