"""``accept --schedule``: each draft served once more with a k for each batch size (vLLM's
``num_speculative_tokens_per_batch_size``), measured at each ``--concurrency`` C beside the fixed k. Here without an
engine: the schedule as the command line gives it and its refusals, what the engine is asked for, the run's
figures and limits from fixed passes (no clock); that vLLM's CPU build serves it is shown with vLLM itself
(``test_accept_server_engine.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eaglequant.common.draft_tokens import each_schedule_range, schedule_text
from eaglequant.common.errors import InputError
from eaglequant.measurement.concurrency import ConcurrentPass
from eaglequant.measurement.measure import (
    GREEDY,
    AcceptanceRunError,
    EngineRun,
    QuantizedDraft,
    Settings,
    measure,
    run_engine,
)
from eaglequant.measurement.statistics import PromptCounts
from tests.conftest import run_cli

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
SCHEDULE = ((1, 1, 3), (2, 4, 1))  # k = 3 one at a time, k = 1 from 2 to 4 in flight


def test_a_schedule_reads_as_vllms_ranges_and_back() -> None:
    assert each_schedule_range("1-2:3,3-8:1") == ((1, 2, 3), (3, 8, 1))
    assert each_schedule_range(" 1:4 , 2-16:2,32-64:0") == ((1, 1, 4), (2, 16, 2), (32, 64, 0))  # a gap: vLLM's
    assert each_schedule_range([[1, 3, 2], (4, 4, 0)]) == ((1, 3, 2), (4, 4, 0))
    assert schedule_text(((1, 1, 4), (2, 16, 2))) == "1:4,2-16:2"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "an empty entry is not START-END:K"),
        ("1-2", "1-2 is not START-END:K"),
        ("1-x:3", "1-x:3 is not START-END:K"),
        ("1-2:3,3-4:-1", "3-4:-1 is not START-END:K"),
        ("3-1:2", "3-1: not a range of batch sizes"),
        ("1-2:65", "1-2:65: k past 64"),
        ("2-3:1", "the first range starts at 2, not 1"),
        ("1-2:3,2-4:1", "ranges overlap or are out of order"),
        ("1-2:3,5-6:1,3-4:2", "ranges overlap or are out of order"),
        ("1-8:0", "no range drafts"),
    ],
)
def test_a_schedule_vllm_would_refuse_is_one_line(given: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        each_schedule_range(given)


def fixed_pass(c: int, seconds: float, drafts: int | None, accepted: int | None) -> ConcurrentPass:
    latencies = tuple(seconds * (1 + 0.01 * i) for i in range(4))
    return ConcurrentPass(c, (32,) * 4, latencies, seconds * 4 / c, drafts, accepted)


def scheduled_runs(tmp_path: Path, alone_after: float = 1.0) -> tuple[Any, list[Settings]]:
    """The target alone takes 1 s a request (``alone_after`` at C = 4 in its run after the drafts), a draft 0.6 s;
    at k = 3 a pass accepts 1.5 tokens a draft (acceptance length 2.5), under the schedule, with k = 1 from 2 in
    flight, 0.25 (1.25): a speed-up of 1/0.6 is within the one and past the other."""
    asked: list[Settings] = []

    def runner_at(at: Settings) -> Callable[[int, Path | None, str], EngineRun]:
        asked.append(at)

        def run(place: int, draft: Path | None, label: str) -> EngineRun:
            alone = draft is None
            again = alone and label.endswith("run 2")
            passes = []
            for c in at.concurrency:
                per_draft = 0.25 if at.schedule and c > 1 else 1.5
                seconds = (alone_after if again and c == 4 else 1.0) if alone else 0.6
                passes.append(fixed_pass(c, seconds, None if alone else 40, None if alone else int(40 * per_draft)))
            prompts = tuple(
                PromptCounts(0 if alone else 10, 0 if alone else 15, () if alone else (7, 5, 3), (i,), (), 31, 3.0)
                for i in range(4)
            )
            return EngineRun("0.32.0", None, 1.0, {GREEDY.name: prompts}, "engine", tuple(passes))

        return run

    dst = tmp_path / "dst"
    dst.mkdir(parents=True, exist_ok=True)
    drafts = [QuantizedDraft(dst, dst, "stored", [], None, None)]
    chosen = Settings(PAIR / "target", ("a", "b", "c", "d"), "test", 2, concurrency=(1, 4), schedule=SCHEDULE)
    return measure(chosen, PAIR / "draft", drafts, runner_at), asked


def test_each_draft_is_served_once_more_with_the_schedule_and_measured_at_each_c(tmp_path: Path) -> None:
    report, asked = scheduled_runs(tmp_path)
    # the target alone, the k asked, the schedule (k its largest), the target alone again
    assert [(s.draft_tokens, s.schedule) for s in asked] == [(2, ()), (2, ()), (3, SCHEDULE), (2, ())]
    for draft in (report.source, *report.quantized):
        (fixed,) = draft.by_draft_tokens
        scheduled = draft.scheduled
        assert fixed.draft_tokens == 2 and not fixed.schedule and scheduled is not None
        assert scheduled.schedule == SCHEDULE and scheduled.draft_tokens == 3
        one, four = scheduled.at_concurrency
        assert one.reported_speedup is not None and one.reported_speedup.value == pytest.approx(1 / 0.6)
        # at C = 4 the schedule drafts k = 1: acceptance length 1.25 over the pass bounds the speed-up, not 2.5
        assert four.drafted.acceptance_length() == pytest.approx(1.25) and four.reported_speedup is None
        assert four.speed_problems == ["speedup-past-acceptance"]
        assert all(c.reported_speedup is not None for c in fixed.at_concurrency)  # the fixed k: within 2.5
    past = [p for p in report.problems if p.code == "speedup-past-acceptance"]
    assert len(past) == 2 and all("at the schedule 1:3,2-4:1" in p.message for p in past), past
    written = report.record().to_json()
    assert written["settings"]["schedule"] == [[1, 1, 3], [2, 4, 1]]
    shown = written["quantized"][0]["scheduled"]
    assert shown["schedule"] == "1:3,2-4:1" and shown["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 4, 1]]
    assert [c["concurrency"] for c in shown["by_concurrency"]] == [1, 4] and shown["by_concurrency"][1][
        "speedup"
    ] is None
    assert written["quantized"][0]["by_draft_tokens"][0]["draft_tokens"] == 2


def test_the_drift_rule_withholds_the_schedules_speedup_too(tmp_path: Path) -> None:
    report, _ = scheduled_runs(tmp_path, alone_after=1.3)
    drifted = [p for p in report.problems if p.code == "target-alone-drifted"]
    assert len(drifted) == 1 and "concurrency 4" in drifted[0].subject
    for draft in (report.source, *report.quantized):
        assert (
            draft.scheduled is not None and "target-alone-drifted" in draft.scheduled.at_concurrency[1].speed_problems
        )
        assert draft.scheduled.at_concurrency[0].reported_speedup is not None  # C = 1 held still


def test_the_engine_is_asked_for_the_schedule_and_must_resolve_it(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs: list[dict[str, Any]] = []
    resolved: dict[str, Any] = {"method": "eagle3", "num_speculative_tokens": 3}

    def engine_job(_python: Path, _probe: str, job: dict[str, Any], _timeout: float, _ranks: int) -> dict[str, Any]:
        jobs.append(job)
        return {"version": "0.32.0", "speculative_config": resolved, "seconds": 1.0, "modes": []}

    monkeypatch.setattr("eaglequant.engine_load.run_engine_job", engine_job)
    settings = Settings(PAIR / "target", ("a", "b"), "test", 2, concurrency=(1, 4), schedule=SCHEDULE).scheduled()
    with pytest.raises(AcceptanceRunError, match=r"did not serve the schedule 1:3,2-4:1 .*without num_speculative"):
        run_engine(Path("python"), settings, PAIR / "draft", "the draft")
    assert jobs[0]["draft_tokens"] == 3 and jobs[0]["schedule"] == [[1, 1, 3], [2, 4, 1]]
    assert jobs[0]["engine_args"]["max_num_seqs"] == 4
    resolved["num_speculative_tokens_per_batch_size"] = [[1, 1, 3], [2, 4, 1]]
    assert run_engine(Path("python"), settings, PAIR / "draft", "the draft").speculative_config == resolved
    run_engine(Path("python"), settings.at(2), PAIR / "draft", "the draft")  # one k: no schedule asked
    assert jobs[-1]["schedule"] == [] and jobs[-1]["draft_tokens"] == 2


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (("--schedule", "1-2:3,3-8:1"), "--schedule picks k by the requests in flight"),
        (("--schedule", "2-8:3", "--concurrency", "2"), "--schedule '2-8:3': the first range starts at 2"),
        (("--schedule", "1-8:3", "--concurrency", "2", "--launch"), "--schedule is measured offline"),
    ],
)
def test_the_command_line_refuses_a_schedule_it_cannot_measure_in_one_line(more: tuple[str, ...], said: str) -> None:
    draft = str(PAIR / "draft")
    done = run_cli("accept", draft, "--source", draft, "--target", str(PAIR / "target"), "--no-record", *more)
    last = done.stderr.strip().splitlines()[-1]
    assert done.exit_code == 2 and said in last and "Traceback" not in done.stderr, done.stderr


def test_running_servers_refuse_a_schedule_in_one_line() -> None:
    draft, url = str(PAIR / "draft"), "http://127.0.0.1:9"
    done = run_cli(
        "accept", draft, "--source", draft, "--server", url, "--server", url, "--reference-server", url,
        "--schedule", "1-8:3", "--concurrency", "2", "--no-record",
    )  # fmt: skip
    assert done.exit_code == 2 and "--schedule is measured offline" in done.stderr.strip().splitlines()[-1]
    one = run_cli("accept", "--server", url, "--schedule", "1-8:3")
    assert one.exit_code == 2 and "--schedule measures speed-ups over the target alone" in one.stderr, one.stderr


def test_the_table_shows_the_schedule_beside_the_fixed_k(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.cli.accept_cmd import render

    report, _ = scheduled_runs(tmp_path)
    render(report)
    shown = " ".join(capsys.readouterr().out.split())
    assert "k = 2 and the schedule 1:3,2-4:1 (k by requests in flight)" in shown, shown
    assert shown.count("│ 1:3,2-4:1 │") == 4 and "none:" in shown, shown  # per draft: one at a time, and at each C
    assert json.dumps(report.record().to_json())  # the whole record writes


def test_searched_is_the_schedule_the_dsts_search_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--schedule searched``: the ``speedup.num_speculative_tokens_per_batch_size`` of each DST's search record,
    one for all; a DST without one, or DSTs that differ, refused in one line."""
    from types import SimpleNamespace

    from eaglequant.measurement.runners import SEARCHED, Offline, _checked_schedule

    recorded = {PAIR / "draft": SCHEDULE}
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")

    def read_search(dst: Path) -> Any:
        schedule = recorded.get(dst)
        return (
            None
            if schedule is None
            else SimpleNamespace(speedup=SimpleNamespace(num_speculative_tokens_per_batch_size=schedule))
        )

    monkeypatch.setattr("eaglequant.record.search.read_search", read_search)
    assert _checked_schedule(SEARCHED, Offline(), (2,), [PAIR / "draft"]) == SCHEDULE
    with pytest.raises(InputError, match=r"schedule='searched': .*other records no schedule"):
        _checked_schedule(SEARCHED, Offline(), (2,), [PAIR / "draft", other])
    recorded[other] = ((1, 4, 2),)
    with pytest.raises(InputError, match=r"recorded different schedules \(.*draft: 1:3,2-4:1; .*other: 1-4:2\)"):
        _checked_schedule(SEARCHED, Offline(), (2,), [PAIR / "draft", other])
