"""``accept --concurrency``: the prompts sent with at most C requests in flight, output tokens per second and the
speed-up at each C, against float64 references and on stand-in servers (which count the requests in flight as
each one begins, so "at most C" is checked, not assumed); the drift rule at each C; the option's refusals."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eaglequant.common.errors import InputError
from eaglequant.measurement.concurrency import ConcurrentPass, concurrent_speedup, merged
from eaglequant.measurement.runners import each_concurrency
from eaglequant.measurement.statistics import t_quantile
from tests.conftest import run_cli
from tests.measurement.test_accept_server import StandIn

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-ins have no one else's traffic: the quiet reads around eaglequant's requests need not wait 0.25 s."""
    monkeypatch.setattr("eaglequant.measurement.server.QUIET_S", 0.02)


def log_interval(value: float, influences: list[float]) -> tuple[float, float, float]:
    m = len(influences)
    se = math.sqrt(m / (m - 1) * math.fsum(e * e for e in influences))
    return value, value * math.exp(-t_quantile(m - 1) * se), value * math.exp(t_quantile(m - 1) * se)


ALONE = ConcurrentPass(2, (32, 32, 30, 32), (1.0, 1.2, 0.9, 1.1), 2.3)
DRAFTED = ConcurrentPass(2, (32, 32, 30, 32), (0.5, 0.7, 0.4, 0.45), 1.1, drafts=50, accepted=74)


def test_output_rate_is_tokens_over_wall_time_with_the_requests_spread() -> None:
    n, lat = [32, 32, 30, 32], [1.0, 1.2, 0.9, 1.1]
    influences = [a / sum(n) - b / math.fsum(lat) for a, b in zip(n, lat, strict=True)]
    rate = ALONE.output_tokens_per_second()
    assert (rate.value, rate.low, rate.high) == pytest.approx(log_interval(126 / 2.3, influences), rel=1e-12)
    assert DRAFTED.acceptance_length() == pytest.approx(1 + 74 / 50) and ALONE.acceptance_length() is None


def test_the_speedup_at_c_pairs_the_prompts_on_the_log_scale() -> None:
    d_lat, a_lat = [0.5, 0.7, 0.4, 0.45], [1.0, 1.2, 0.9, 1.1]
    n = [32, 32, 30, 32]
    influences = [
        (x / 126 - dl / math.fsum(d_lat)) - (x / 126 - al / math.fsum(a_lat))
        for x, dl, al in zip(n, d_lat, a_lat, strict=True)
    ]
    found = concurrent_speedup(DRAFTED, ALONE)
    expected = log_interval((126 / 1.1) / (126 / 2.3), influences)
    assert (found.value, found.low, found.high) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(concurrent_speedup(DRAFTED, ConcurrentPass(2, (1,), (1.0,), 1.0)).value)  # other prompts


def test_the_target_alones_passes_merge_by_prompt() -> None:
    both = merged([ALONE, ConcurrentPass(2, (32, 32, 30, 32), (2.0, 2.4, 1.8, 2.2), 4.6)])
    assert both.tokens == (64, 64, 60, 64) and both.latencies == pytest.approx((3.0, 3.6, 2.7, 3.3))
    assert both.output_tokens_per_second().value == pytest.approx(252 / 6.9)


@pytest.mark.parametrize(
    ("given", "said"), [("0", "0 is not a whole number"), ("1,x", "x is not"), ("2,2", "2 is given twice"), ("", "")]
)
def test_a_concurrency_that_is_not_a_list_of_counts_is_one_line(given: str, said: str) -> None:
    with pytest.raises(InputError, match=said or "an empty entry"):
        each_concurrency(given)
    assert each_concurrency("1, 2,8") == (1, 2, 8) and each_concurrency([4]) == (4,)


def test_one_server_alone_refuses_the_speedup_options(serve: Callable[[StandIn], str]) -> None:
    for flag, value in (("--concurrency", "2"), ("--target-alone-runs", "3")):
        done = run_cli("accept", "--server", serve(StandIn()), flag, value)
        last = done.stderr.strip().splitlines()[-1]
        assert done.exit_code == 2 and f"{flag} measures speed-ups over the target alone" in last, done.stderr


def measured_at(serve: Callable[[StandIn], str], reference: StandIn, *more: str) -> tuple[int, str, list[StandIn]]:
    states = [reference, StandIn(delay_s=reference.delay_s), StandIn(delay_s=reference.delay_s)]
    reference_url, source, dst = (serve(state) for state in states)
    draft = str(PAIR / "draft")
    done = run_cli(
        "accept", draft, "--source", draft, "--server", source, "--server", dst, "--reference-server", reference_url,
        "--max-prompts", "4", "--max-tokens", "8", "--no-record", "--concurrency", "1,2,4", *more,
    )  # fmt: skip
    return done.exit_code, done.stdout + done.stderr, states


def test_each_run_is_sent_with_at_most_c_in_flight_and_reports_each_c(serve: Callable[[StandIn], str]) -> None:
    """The plumbing, timed by the wall clock of a machine others share: the speed-ups are reported or refused with
    their codes, whichever the machine gave (the verdicts themselves are tested with fixed passes below)."""
    code, shown, states = measured_at(serve, StandIn(draft=False, delay_s=0.03), "--json")
    for state in states:  # per run: 4 prompts one at a time, then a pass at C = 1, 2 and 4
        runs = [state.started[i : i + 16] for i in range(0, len(state.started), 16)]
        assert len(runs) == (2 if state is states[0] else 1)  # the target alone before and after the drafts
        for started in runs:  # at most C; more than one at once where C allows (how many: the machine's timing)
            assert max(started[:8]) == 1 and max(started[8:12]) <= 2 and 2 <= max(started[12:]) <= 4, started
    record = json.loads(shown.split("\nserving")[0])
    assert code == (0 if record["ok"] else 3)
    alone = record["target_alone"]["by_concurrency"]
    assert [c["concurrency"] for c in alone] == [1, 2, 4] and all(len(c["runs"]) == 2 for c in alone)
    rates = [c["output_tokens_per_second"]["value"] for c in alone]
    assert rates[0] < rates[2]  # each request sleeps as long, four at once
    for draft in (record["source"], *record["quantized"]):
        (at,) = draft["by_draft_tokens"]
        assert [c["concurrency"] for c in at["by_concurrency"]] == [1, 2, 4]
        for c in at["by_concurrency"]:
            assert (c["speedup"] is None) == bool(c["speed_problems"]) and c["measured_speedup"]["value"] > 0, c
            assert c["acceptance_length"] == pytest.approx(at["acceptance_length"]["value"], abs=1e-4)
    table = " ".join(measured_at(serve, StandIn(draft=False))[1].split())  # the table, without the wait
    assert "output tokens/s with at most C requests in flight" in table, table


def test_a_target_alone_slowed_in_its_second_runs_passes_gives_no_speedup_there(
    serve: Callable[[StandIn], str],
) -> None:
    slow_passes = tuple(range(16 + 8, 16 + 16))  # the target alone's second run: its C = 2 and C = 4 passes
    code, shown, _ = measured_at(serve, StandIn(draft=False, delay_s=0.02, slow=slow_passes), "--json")
    record = json.loads(shown.split("\nserving")[0])
    assert code == 3, shown
    drifted = {p["subject"].rsplit(" ", 1)[-1] for p in record["problems"] if p["code"] == "target-alone-drifted"}
    assert {"2", "4"} <= drifted, record["problems"]
    for draft in (record["source"], *record["quantized"]):
        by_c = {c["concurrency"]: c for c in draft["by_draft_tokens"][0]["by_concurrency"]}
        assert by_c[2]["speedup"] is None and "target-alone-drifted" in by_c[4]["speed_problems"], by_c


# ---- the verdicts at each C, from fixed passes (no clock) ------------------------------------------------------


def fixed_pass(c: int, seconds: float, drafting: bool) -> ConcurrentPass:
    latencies = tuple(seconds * (1 + 0.01 * i) for i in range(4))
    return ConcurrentPass(c, (32,) * 4, latencies, seconds * 4 / c, 40 if drafting else None, 60 if drafting else None)


def fixed_runs(tmp_path: Path, alone_after: float) -> Any:
    """The target alone takes 1 s a request, a draft 0.6 s (a speed-up of 1/0.6 at every C, below its acceptance
    length of 2.5); the target alone's run after the drafts takes ``alone_after`` s a request at C = 4 only."""
    from eaglequant.measurement.measure import GREEDY, EngineRun, QuantizedDraft, Settings, measure
    from eaglequant.measurement.statistics import PromptCounts

    def runner_at(at: Settings) -> Callable[[int, Path | None, str], EngineRun]:
        def run(place: int, draft: Path | None, label: str) -> EngineRun:
            alone = draft is None
            again = alone and label.endswith("run 2")
            seconds = {c: (alone_after if again and c == 4 else 1.0) if alone else 0.6 for c in at.concurrency}
            prompts = tuple(
                PromptCounts(0 if alone else 10, 0 if alone else 15, () if alone else (7, 5, 3), (i,), (), 31, 3.0)
                for i in range(4)
            )
            passes = tuple(fixed_pass(c, seconds[c], not alone) for c in at.concurrency)
            return EngineRun("0.32.0", None, 1.0, {GREEDY.name: prompts}, "engine", passes)

        return run

    dst = tmp_path / "dst"
    dst.mkdir(parents=True)
    drafts = [QuantizedDraft(dst, dst, "stored", [], None, None)]
    chosen = Settings(PAIR / "target", ("a", "b", "c", "d"), "test", 3, concurrency=(1, 4))
    return measure(chosen, PAIR / "draft", drafts, runner_at)


def test_each_c_gives_its_speedup_and_a_drifted_c_alone_is_refused(tmp_path: Path) -> None:
    held = fixed_runs(tmp_path, alone_after=1.0)
    assert held.ok and held.settings.served_arguments()["max_num_seqs"] == 4
    for at_c in held.source.by_draft_tokens[0].at_concurrency:
        assert at_c.reported_speedup is not None and at_c.reported_speedup.value == pytest.approx(1 / 0.6)
    moved = fixed_runs(tmp_path / "moved", alone_after=1.3)
    assert [p.code for p in moved.problems] == ["target-alone-drifted"] and "concurrency 4" in moved.problems[0].subject
    one, four = moved.source.by_draft_tokens[0].at_concurrency
    assert one.reported_speedup is not None and four.reported_speedup is None
    assert four.speed_problems == ["target-alone-drifted"]
    assert moved.source.by_draft_tokens[0].reported_speedup is not None  # one at a time it held still
