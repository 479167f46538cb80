"""``accept --server URL`` with no DST: the acceptance length of the one server a team already runs.

Two ways, both read from the server's own spec-decode counters on ``/metrics`` (``server.py``):

- the prompts, sent one at a time as for the comparative form (the server must be eaglequant's alone while it
  measures): acceptance length and per-position rates with 95% intervals over prompts, per decoding mode;
- a window (``--window SECONDS``) of the server's live traffic: eaglequant sends nothing, reads the counters,
  waits, reads them again; the figures are the window's drafts'. No interval: the drafts belong to requests
  eaglequant cannot tell apart, so there are no prompts to cluster them by.

There is no reference server and no DST here: nothing is checked lossless, nothing is recorded into a draft.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord
from eaglequant.common.progress import Tally
from eaglequant.measurement.measure import Settings
from eaglequant.measurement.record import SettingsRecord
from eaglequant.measurement.spec_counters import SpecCounters
from eaglequant.measurement.statistics import Acceptance, AcceptanceFigures, decode_rate


@dataclass(frozen=True)
class WindowCounts(JsonRecord):
    """The server's spec-decode counters' change over a window of its traffic."""

    json_computed = ("acceptance_length", "per_position")

    seconds: float
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]

    @property
    def acceptance_length(self) -> float:
        """1 + accepted tokens per draft."""
        return round(1 + self.accepted / self.drafts, 5)

    @property
    def per_position(self) -> list[float]:
        """Per position j: the share of drafts whose first j + 1 tokens were accepted."""
        return [round(a / self.drafts, 5) for a in self.accepted_per_position]


@dataclass(frozen=True)
class ServerMode(JsonRecord):
    """One decoding mode's acceptance on the server, as recorded (:meth:`of`): its figures, and its decode tokens
    per second over the prompts to 4 decimals (None: not timed)."""

    json_inlined = ("acceptance",)

    acceptance: AcceptanceFigures
    decode_tokens_per_second: float | None

    @classmethod
    def of(cls, acceptance: Acceptance) -> ServerMode:
        rate = decode_rate(acceptance.prompts)
        return cls(acceptance.figures(), None if rate is None else round(rate, 4))


@dataclass
class ServerAcceptance(JsonRecord):
    """One running server's acceptance: over the prompts (``settings`` and ``modes``, each mode's decode throughput
    timed by ``clock``) or over a window of its traffic (``window``)."""

    json_computed = ("ok",)

    server: str
    model: str
    version: str
    draft_tokens: int
    settings: SettingsRecord | None  # the prompts' settings; None over a window
    modes: dict[str, ServerMode] = field(default_factory=dict)  # per decoding mode, over the prompts
    window: WindowCounts | None = None
    notes: list[Finding] = field(default_factory=list)
    clock: str | None = None  # "engine": the server's decode histograms; "wall": the client's; None: not timed

    @property
    def ok(self) -> bool:
        """Nothing is checked against a budget or a reference: a server that could be measured is ok."""
        return True


def measure_one_server(
    url: str, window_s: float | None, settings: Settings | None, tally: Tally, sleep: Callable[[float], None]
) -> ServerAcceptance:
    """The server at ``url`` measured over ``settings``'s prompts, or over ``window_s`` seconds of its traffic."""
    from eaglequant.measurement.server import Server, counters_over_window, measure_on_server

    server = Server(url, "the server")
    model = server.model()
    if window_s is not None:
        started = time.monotonic()
        delta: SpecCounters = counters_over_window(server, window_s, sleep)
        seconds = round(time.monotonic() - started, 1)
        counts = WindowCounts(seconds, delta.drafts, delta.draft_tokens, delta.accepted, delta.accepted_per_position)
        tally.finished(f"window of {window_s:g} s read")
        live = (
            f"measured over {window_s:g} s of the server's live traffic ({delta.drafts} drafts): eaglequant sent "
            "nothing; no interval, as the drafts belong to requests it cannot tell apart (no prompts to cluster "
            "them by), and the figures are those of whatever the server was asked in the window"
        )
        notes = [_one(url), Finding("live-traffic", url, live)]
        k = len(delta.accepted_per_position)
        return ServerAcceptance(url, model, server.version(), k, None, window=counts, notes=notes)
    assert settings is not None
    run = measure_on_server(server, settings, True, lambda what: tally.finished(f"{what} ({url})"))
    modes = {mode.name: ServerMode.of(run.acceptance(mode.name)) for mode in settings.modes}
    return ServerAcceptance(
        url, model, run.version, settings.draft_tokens, settings.record(), modes, notes=[_one(url)], clock=run.clock
    )


def _one(url: str) -> Finding:
    one = (
        f"measured on the one running server at {url} through its /metrics counters: no reference server, so "
        "greedy output was not checked against the target's alone, and no DST, so nothing was recorded"
    )
    return Finding("one-server", url, one)
