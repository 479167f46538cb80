"""Acceptance measured on a running OpenAI-compatible vLLM server: its spec-decode counters on ``/metrics``
read around each of eaglequant's requests.

The prompts are sent one at a time (``/v1/completions``: greedy or sampled, ``ignore_eos``, ``max_tokens``, the
token ids and, greedy, the top two log-probabilities for the near-tie check), and the counters are read before
and after each; the difference is that prompt's figures, as the offline run reads ``LLM.get_metrics()``. The
server must be eaglequant's alone while it measures: counters that move between two reads with no request in
flight, or by more than one request can, are refused, as is a server that serves no draft.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, suggested, words
from eaglequant.measurement.measure import GREEDY, EngineRun, Mode, Settings
from eaglequant.measurement.spec_counters import (
    MetricsFormatError,
    SpecCounters,
    one_request_problem,
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
            detail = response.text.strip().replace("\n", " ")[:300]
            raise ServerError(f"{self.label} ({self.url}): {path} answered {response.status_code}: {detail}")
        return response.content

    def _json(self, path: str, body: dict[str, Any] | None = None, timeout: float = READ_TIMEOUT_S) -> Any:
        raw = self._open(path, body, timeout)
        try:
            return json.loads(raw)
        except ValueError:
            raise ServerError(f"{self.label} ({self.url}): {path} did not answer JSON") from None

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
        try:
            return parse_spec_counters(self._open("/metrics").decode("utf-8", errors="replace"))
        except MetricsFormatError as error:
            raise ServerError(f"{self.label} ({self.url}): /metrics is not Prometheus text at: {error}") from None

    def complete(self, model: str, prompt: str, settings: Settings, mode: Mode, seed: int) -> dict[str, Any]:
        """One generation, as the offline run makes it; the choice's token ids and, greedy, top-2 gaps."""
        greedy = mode.temperature == 0.0
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
    quiet = _quiet_counters(server)
    _check_drafting(server, quiet, settings, drafting)
    last = quiet
    modes: dict[str, tuple[PromptCounts, ...]] = {}
    measured_modes = settings.modes if drafting else (GREEDY,)
    for mode in measured_modes:
        prompts = []
        for index, prompt in enumerate(settings.prompts):
            before = server.counters()
            if before != last:
                raise _traffic(server, f"its counters moved with no request in flight, before prompt {index}")
            record = server.complete(model, prompt, settings, mode, mode.seed + index)
            after = _settled(server)
            if drafting and after is not None and before is not None:
                record |= _prompt_figures(server, after.minus(before), settings, len(record["token_ids"]), index)
            prompts.append(PromptCounts.from_json(record))
            last = after
            in_mode = f", {mode.name}" if len(measured_modes) > 1 else ""
            prompt_done(f"prompt {index + 1}/{len(settings.prompts)}{in_mode}")
        modes[mode.name] = tuple(prompts)
    resolved = {"num_speculative_tokens": settings.draft_tokens, "server": server.url} if drafting else None
    return EngineRun(server.version(), resolved, round(time.monotonic() - started, 1), modes)


def _quiet_counters(server: Server) -> SpecCounters | None:
    first = server.counters()
    time.sleep(QUIET_S)
    second = server.counters()
    if first != second:
        raise _traffic(server, f"its counters moved in {QUIET_S} s with no request of eaglequant's in flight")
    return second


def _settled(server: Server) -> SpecCounters | None:
    """The counters once two reads in a row agree (vLLM records a step's counters as it sends its output)."""
    previous = server.counters()
    for _ in range(SETTLE_READS):
        time.sleep(QUIET_S / 5)
        current = server.counters()
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
