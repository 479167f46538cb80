"""A machine really busy during one arm (issue 62, item 5): stand-in servers whose every token costs real CPU work,
timed by their own clock as vLLM's decode histograms are, and processes that burn every core (twice as many as the
machine has, plus two) started while the target alone runs first and stopped after its last prompt. ``accept``
must withhold every speed-up, saying in one line that the target alone drifted (exit 3).

Nothing here is slowed by arithmetic: the hog takes the stand-in's CPU time, so the first run of the target alone
decodes about (2 cores + 3) / cores times slower than its second (3.5 on two cores), or more, far past the 15% the
rule allows, whatever else the cores carry. The suite runs its tests one at a time (no parallel runner, so no marker
keeps timing-sensitive tests apart): the hog slows nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eaglequant.measurement.limits import TARGET_DRIFT
from tests.conftest import run_cli
from tests.measurement.test_accept_server import StandIn

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
PROMPTS, TOKENS = 3, 8
WORK = 100_000  # loop turns a token costs the stand-in: about 8 ms of one core here (a few seconds in all)


class Hog:
    """Processes that each spin one core flat out (``python -c 'while 1: pass'``), twice as many as the cores
    eaglequant may use, plus two (so that other work on the cores cannot slow the second run as much), from
    :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.spells: list[tuple[float, float]] = []  # each start and stop, monotonic seconds

    @property
    def size(self) -> int:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return 2 * cores + 2

    def start(self) -> None:
        command = [sys.executable, "-I", "-S", "-c", "while 1: pass"]
        self.processes = [subprocess.Popen(command) for _ in range(self.size)]
        self.spells.append((time.monotonic(), 0.0))

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        self.processes = []
        if self.spells:
            self.spells[-1] = (self.spells[-1][0], time.monotonic())


@pytest.fixture
def hog() -> Iterator[Hog]:
    made = Hog()
    yield made
    made.stop()  # whatever the test did


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-ins have no one else's traffic: the quiet reads around eaglequant's requests need not wait 0.25 s."""
    monkeypatch.setattr("eaglequant.measurement.server.QUIET_S", 0.02)


def burn(turns: int) -> float:
    """``turns`` turns of a Python loop (one core, the GIL held), and the seconds they took."""
    started = time.perf_counter()
    total = 0
    for i in range(turns):
        total += i * i
    return time.perf_counter() - started


@dataclass
class Working(StandIn):
    """A stand-in whose tokens cost ``WORK`` loop turns each, its histograms holding the seconds they really took;
    ``hog`` (given) runs from its first completion to the end of its ``hogged``-th."""

    hog: Hog | None = None
    hogged: int = 0
    timed: list[float] = field(default_factory=list)  # each completion's decode seconds, as its histograms hold

    def decode_seconds(self, prompt: str, tokens: int) -> float:  # type: ignore[override]
        seconds = burn(WORK * tokens)
        self.timed.append(seconds)
        return seconds

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        first = self.completions == 0
        if self.hog is not None and first:
            self.hog.start()
        try:
            return super().complete(body)
        finally:
            if self.hog is not None and self.completions == self.hogged:
                self.hog.stop()


def test_a_hog_during_the_target_alones_first_run_withholds_every_speedup(
    serve: Callable[[StandIn], str], hog: Hog
) -> None:
    reference = Working(draft=False, hog=hog, hogged=PROMPTS)  # the target alone: its first run is the hog's
    drafts = [Working(), Working()]
    draft = str(PAIR / "draft")
    done = run_cli(
        "accept", draft, "--source", draft, "--server", serve(drafts[0]), "--server", serve(drafts[1]),
        "--reference-server", serve(reference), "--max-prompts", str(PROMPTS), "--max-tokens", str(TOKENS),
        "--no-record", "--json",
    )  # fmt: skip
    assert len(hog.spells) == 1 and hog.spells[0][1] > 0 and not hog.processes, hog.spells  # one arm, then stopped
    quiet = reference.timed[PROMPTS:]
    busy = reference.timed[:PROMPTS]
    assert len(quiet) == PROMPTS and sum(busy) > 1.5 * sum(quiet), (busy, quiet)  # the hog took its CPU time

    record = json.loads(done.stdout)
    assert done.exit_code == 3 and not record["ok"], done.stdout
    first, again = record["target_alone"]["runs"]
    assert again > (1 + TARGET_DRIFT) * first, record["target_alone"]
    drifted = [p for p in record["problems"] if p["code"] == "target-alone-drifted"]
    assert len(drifted) == 1 and "the machine did not hold still" in drifted[0]["message"], record["problems"]
    for each in (record["source"], *record["quantized"]):
        for at in each["by_draft_tokens"]:
            assert at["speedup"] is None and "target-alone-drifted" in at["speed_problems"], at
