"""Decode tokens per second and the speed-up over the target alone, at several k: the arithmetic against a float64
reference, the fields of every way ``accept`` runs (offline through the probe's output, on running servers and on
one server), the k lists refused, and the typed reading back (:func:`~eaglequant.measurement.speed.measured_speeds`).
No time is asserted: the stand-ins' clocks are their own numbers."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eaglequant.common.errors import InputError
from eaglequant.measurement.measure import (
    GREEDY,
    EngineRun,
    QuantizedDraft,
    Settings,
    measure,
    run_engine,
)
from eaglequant.measurement.record import AcceptanceRecord
from eaglequant.measurement.runners import each_draft_tokens
from eaglequant.measurement.server import Server, measure_on_server
from eaglequant.measurement.speed import measured_speeds
from eaglequant.measurement.statistics import PromptCounts, decode_rate, speedup, t_quantile
from tests.conftest import run_cli
from tests.measurement.test_accept_server import StandIn, settings
from tests.measurement.test_acceptance_record import RECORD

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"


def timed(tokens: int, seconds: float, token_ids: tuple[int, ...] = (1, 2, 3)) -> PromptCounts:
    return PromptCounts(4, 6, (3, 2, 1), token_ids, (), tokens, seconds)


def reference_speedup(drafted: list[tuple[int, float]], alone: list[tuple[int, float]]) -> tuple[float, float, float]:
    """The estimator written out in float64 with numpy, apart from the code under test: ln S from the totals, each
    prompt's influence on it, the clustered standard error and Student's t on m - 1 degrees of freedom."""
    n_d, t_d = np.array(drafted, dtype=np.float64).T
    n_a, t_a = np.array(alone, dtype=np.float64).T
    log_s = np.log(n_d.sum() / t_d.sum()) - np.log(n_a.sum() / t_a.sum())
    e = n_d / n_d.sum() - t_d / t_d.sum() - n_a / n_a.sum() + t_a / t_a.sum()
    m = len(e)
    se = np.sqrt(m / (m - 1) * np.sum(e**2))
    t = {3: 3.182}[m - 1]  # the two-sided 95% Student t quantile on 3 degrees of freedom, from the table
    return float(np.exp(log_s)), float(np.exp(log_s - t * se)), float(np.exp(log_s + t * se))


DRAFTED = [(95, 1.9), (95, 2.6), (95, 2.2), (95, 3.1)]
ALONE = [(95, 4.8), (95, 5.0), (95, 5.5), (95, 5.1)]


def test_the_speedup_is_the_ratio_of_decode_rates_paired_by_prompt() -> None:
    drafted = [timed(n, t) for n, t in DRAFTED]
    alone = [timed(n, t) for n, t in ALONE]
    found = speedup(drafted, alone)
    value, low, high = reference_speedup(DRAFTED, ALONE)
    assert found.value == pytest.approx(value, rel=1e-12)
    assert (found.low, found.high) == (pytest.approx(low, rel=1e-3), pytest.approx(high, rel=1e-3))
    assert t_quantile(3) == 3.182
    # by hand: 380 tokens in 9.8 s against 380 in 20.4 s
    assert found.value == pytest.approx(20.4 / 9.8) and decode_rate(alone) == pytest.approx(380 / 20.4)
    # symmetric on the log scale, not on the ratio's
    assert found.value / found.low == pytest.approx(found.high / found.value)
    assert found.value - found.low < found.high - found.value


def test_a_speedup_needs_every_prompt_timed_and_one_prompt_has_no_interval() -> None:
    one = speedup([timed(10, 1.0)], [timed(10, 2.0)])
    assert one.value == pytest.approx(2.0) and (one.low, one.high) == (-math.inf, math.inf)
    assert one.to_json() == {"value": 2.0, "low": None, "high": None}
    untimed = PromptCounts(4, 6, (3, 2, 1), (1,))
    assert decode_rate([timed(10, 1.0), untimed]) is None
    assert math.isnan(speedup([timed(10, 1.0), untimed], [timed(10, 1.0)] * 2).value)
    assert math.isnan(speedup([timed(10, 1.0)], [timed(10, 1.0)] * 2).value)  # different prompts


def test_prompt_counts_read_with_and_without_timing() -> None:
    old = PromptCounts.from_json({"drafts": 2, "accepted": 3, "accepted_per_position": [2, 1], "token_ids": [5]})
    assert (old.decode_tokens, old.decode_seconds, old.timed) == (None, None, False)
    new = PromptCounts.from_json({"token_ids": [5, 6], "decode_tokens": 1, "decode_seconds": 0.25})
    assert (new.decode_tokens, new.decode_seconds, new.timed) == (1, 0.25, True)


@pytest.mark.parametrize(
    ("given", "ks"), [(3, (3,)), ("3", (3,)), ("1,2,3,4", (1, 2, 3, 4)), (" 4, 2", (4, 2)), ([2, 5], (2, 5))]
)
def test_draft_tokens_take_one_k_or_several_the_first_the_primary(given: Any, ks: tuple[int, ...]) -> None:
    assert each_draft_tokens(given) == ks


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("0", "0 is not a whole number of tokens from 1 to 64"),
        ("1,1", "1 is given twice"),
        ("1,x", "x is not a whole number"),
        ("2,65", "65 is not"),
        ("1,,2", "an empty entry is not"),
        ("", "an empty entry is not"),
        ([], "no k"),
        (2.5, "2.5 is not"),
        (True, "True is not"),
    ],
)
def test_a_bad_k_list_is_one_line_naming_what_was_given(given: Any, said: str) -> None:
    with pytest.raises(InputError, match=said) as raised:
        each_draft_tokens(given)
    assert raised.value.one_line().startswith(f"draft_tokens={given!r}")


@pytest.mark.parametrize("given", ["1,1", "0", "3,abc"])
def test_the_command_line_names_the_flag_as_typed(given: str) -> None:
    done = run_cli("accept", str(PAIR / "draft"), "--target", str(PAIR / "target"), "--draft-tokens", given)
    assert done.exit_code == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --draft-tokens '{given}'") and "Traceback" not in done.stderr, done.stderr


def test_running_servers_draft_one_k(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.api.acceptance import accept, accept_server

    reference, source, dst = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn())
    with pytest.raises(InputError, match="drafts the one k it was started with"):
        accept([PAIR / "draft"], source=PAIR / "draft", server=[source, dst], reference_server=reference,
               draft_tokens=[3, 2], record=False)  # fmt: skip
    with pytest.raises(InputError, match="drafts the one k it was started with"):
        accept_server(source, draft_tokens=(3, 4))
    draft = str(PAIR / "draft")
    done = run_cli(
        "accept", draft, "--source", draft, "--server", source, "--server", dst, "--reference-server", reference,
        "--draft-tokens", "3,2", "--no-record",
    )  # fmt: skip
    assert done.exit_code == 2 and "--draft-tokens '3,2': each running server drafts the one k" in done.stderr


def test_progress_counts_each_run_at_each_k() -> None:
    from eaglequant.measurement.runners import Offline, Servers

    chosen = Settings(PAIR / "target", ("a", "b"), "test", 3, more_draft_tokens=(1, 2))
    assert Offline().steps(chosen, 2) == 2 + 3 * 3  # the target alone twice; the source and 2 DSTs at 3 k
    assert Servers(("u", "v"), "r").steps(chosen, 1) == 2 * (2 + 2 * 3)  # a step a prompt


# ---- several k through measure(), with a runner that makes each run's figures from its k -----------------------


def fake_run(k: int, label: str, prompts: int = 4) -> EngineRun:
    """A run whose figures follow from k and the draft: the target alone is slowest, a draft faster with k, the
    quantized one a little more than the source; the same greedy tokens throughout (lossless)."""
    counts = []
    for i in range(prompts):
        if label.startswith("no draft"):
            counts.append(PromptCounts(0, 0, (), (i, 1, 2), (), 95, 5.0 + 0.2 * i))
        else:
            faster = 1.0 + 0.3 * k + (0.1 if "quantized" in label else 0.0)
            per_position = tuple(max(0, 6 - j - i % 2) for j in range(k))
            counts.append(PromptCounts(10, sum(per_position), per_position, (i, 1, 2), (), 95, (5.0 + i) / faster))
    return EngineRun("0.32.0", {"num_speculative_tokens": k}, 1.0, {GREEDY.name: tuple(counts)}, "engine")


def several_k(tmp_path: Path, ks: tuple[int, ...]) -> tuple[Any, list[tuple[int, int, str]]]:
    calls: list[tuple[int, int, str]] = []

    def runner_at(at: Settings) -> Callable[[int, Path | None, str], EngineRun]:
        assert at.more_draft_tokens == ()

        def run(place: int, draft: Path | None, label: str) -> EngineRun:
            calls.append((at.draft_tokens, place, label))
            return fake_run(at.draft_tokens, label if draft is None or place < 2 else "quantized")

        return run

    quantized = tmp_path / "quantized"
    quantized.mkdir()
    (quantized / "config.json").write_text("{}")
    drafts = [QuantizedDraft(quantized, quantized, "stored", [], "fp8-per-channel", 0.05)]
    chosen = Settings(PAIR / "target", ("a", "b", "c", "d"), "test", ks[0], more_draft_tokens=ks[1:])
    return measure(chosen, PAIR / "draft", drafts, runner_at), calls


def test_several_k_run_the_target_alone_before_and_after_each_draft_per_k(tmp_path: Path) -> None:
    report, calls = several_k(tmp_path, (2, 1, 4))
    runs = [(k, place) for k, place, _ in calls]
    assert runs == [(2, 0), (2, 1), (2, 2), (1, 1), (1, 2), (4, 1), (4, 2), (2, 0)]
    assert calls[3][2].endswith(", k = 1")
    (quantized,) = report.quantized
    for draft in (report.source, quantized):
        assert [at.draft_tokens for at in draft.by_draft_tokens] == [2, 1, 4]
        assert draft.run is draft.by_draft_tokens[0].run  # the primary k is the report's (the gate's)
    alone = report.alone.modes[GREEDY.name]
    for at in quantized.by_draft_tokens:
        greedy = at.run.modes[GREEDY.name]
        assert at.speedup == speedup(greedy, alone)
        assert at.speedup.value == pytest.approx(decode_rate(greedy) / decode_rate(alone))
        source_at = next(s for s in report.source.by_draft_tokens if s.draft_tokens == at.draft_tokens)
        assert at.difference is not None and at.difference.value == pytest.approx(
            at.run.acceptance(GREEDY.name).length().value - source_at.run.acceptance(GREEDY.name).length().value
        )
        assert at.lossless.ok
    faster = {at.draft_tokens: at.speedup.value for at in quantized.by_draft_tokens}
    assert 1 < faster[1] < faster[2] < faster[4]  # the stand-in decodes faster with k
    assert report.source.by_draft_tokens[0].difference is None


def test_the_report_and_the_record_give_each_k_and_read_back_typed(tmp_path: Path) -> None:
    from eaglequant.measurement.record import write_acceptance

    report, _ = several_k(tmp_path, (3, 1))
    written = report.record().to_json()
    assert written["target_alone"]["clock"] == "engine"
    alone_rate = written["target_alone"]["decode_tokens_per_second"]
    assert alone_rate == pytest.approx(4 * 95 / sum(5.0 + 0.2 * i for i in range(4)), rel=1e-4)
    (quantized,) = written["quantized"]
    assert [at["draft_tokens"] for at in quantized["by_draft_tokens"]] == [3, 1]
    first = quantized["by_draft_tokens"][0]
    assert set(first) == {
        "draft_tokens", "acceptance_length", "decode_tokens_per_second", "clock", "speedup", "difference", "lossless",
        "measured_speedup", "speed_problems", "by_concurrency",
    }  # fmt: skip
    assert first["speed_problems"] == [] and first["measured_speedup"] == first["speedup"]
    assert written["target_alone"]["runs"] == [alone_rate, alone_rate] and written["target_alone"]["drift"] == 0
    assert set(first["speedup"]) == {"value", "low", "high"} and first["speedup"]["low"] < first["speedup"]["value"]
    assert quantized["modes"]["greedy"]["decode_tokens_per_second"] == first["decode_tokens_per_second"]
    write_acceptance(tmp_path / "quantized", report.for_draft(str(tmp_path / "quantized")).record())
    recorded = json.loads((tmp_path / "quantized" / "eaglequant_accept.json").read_text())
    speeds = measured_speeds(recorded)
    assert [(s.label, s.draft_tokens) for s in speeds] == [
        ("source", 3), ("source", 1), (str(tmp_path / "quantized"), 3), (str(tmp_path / "quantized"), 1)
    ]  # fmt: skip
    for speed, at in zip(speeds[2:], quantized["by_draft_tokens"], strict=True):
        assert speed.alone_seconds_per_token == pytest.approx(1 / alone_rate)
        assert speed.drafted_seconds_per_token == pytest.approx(1 / at["decode_tokens_per_second"])
        assert speed.acceptance_length == at["acceptance_length"]["value"]
        assert (speed.speedup.value, speed.speedup.low, speed.speedup.high) == tuple(at["speedup"].values())
        assert speed.alone_seconds_per_token / speed.drafted_seconds_per_token == pytest.approx(
            speed.speedup.value, rel=1e-3
        )
    assert AcceptanceRecord.from_json(recorded).quantized[0].by_draft_tokens[1].draft_tokens == 1


def test_a_record_without_timing_still_reads_and_gives_no_speeds() -> None:
    record = AcceptanceRecord.from_json(RECORD)
    assert record.target_alone is None and record.source.by_draft_tokens == () and record.device is None
    assert measured_speeds(RECORD) == []


def test_a_lossy_draft_at_another_k_is_a_problem_the_gate_stays_at_the_primary(tmp_path: Path) -> None:
    from dataclasses import replace

    report, _ = several_k(tmp_path, (3, 1))
    (quantized,) = report.quantized
    lossy = replace(
        quantized.by_draft_tokens[1], lossless=replace(quantized.lossless, equal=2, first_difference=(1, 0))
    )
    quantized.by_draft_tokens[1] = lossy
    (problem,) = quantized.problems
    assert problem.code == "not-lossless" and "at k = 1:" in problem.message


# ---- each way accept runs ----------------------------------------------------------------------------------------


def test_offline_reads_the_probes_decode_times_and_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    probe_output = {
        "version": "0.32.0",
        "speculative_config": None,
        "seconds": 3.0,
        "modes": [
            {
                "name": "greedy",
                "temperature": 0.0,
                "clock": "engine",
                "prompts": [
                    {"token_ids": [1, 2, 3], "decode_tokens": 2, "decode_seconds": 0.5},
                    {"token_ids": [4, 5, 6], "decode_tokens": 2, "decode_seconds": 0.3},
                ],
            }
        ],
    }
    monkeypatch.setattr("eaglequant.engine_load.run_engine_job", lambda *_args: probe_output)
    run = run_engine(Path("/engine/python"), Settings(PAIR / "target", ("a", "b"), "test"), None, "no draft")
    assert run.clock == "engine" and run.decode_tokens_per_second() == pytest.approx(4 / 0.8)


def test_the_probe_times_by_the_engine_clock_else_by_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the probe sets vLLM's switches as it is imported
    from eaglequant.engine_load.probes import vllm_accept

    class Stats:
        first_token_ts, last_token_ts = 100.0, 100.75

    class Output:
        metrics = Stats()

    assert vllm_accept.engine_decode(Output(), 4) == (3, 0.75)
    assert vllm_accept.engine_decode(object(), 4) is None  # no metrics: disable_log_stats, or another release
    records = [{"token_ids": [1, 2, 3, 4]}, {"token_ids": [5, 6, 7, 8]}]
    assert vllm_accept.timed(records, [(3, 0.75), (3, 0.5)], [1.0, 0.9]) == "engine"
    assert [(r["decode_tokens"], r["decode_seconds"]) for r in records] == [(3, 0.75), (3, 0.5)]
    assert vllm_accept.timed(records, [(3, 0.75), None], [1.0, 0.9]) == "wall"  # one clock for the whole run
    assert [(r["decode_tokens"], r["decode_seconds"]) for r in records] == [(4, 1.0), (4, 0.9)]


def test_a_server_is_timed_by_its_decode_histograms(serve: Callable[[StandIn], str]) -> None:
    state = StandIn(histograms=True)
    chosen = settings()
    run = measure_on_server(Server(serve(state), "stand-in"), chosen, drafting=True)
    assert run.clock == "engine"
    for prompt, text in zip(run.modes["greedy"], chosen.prompts, strict=True):
        assert prompt.decode_tokens == 11  # 12 generated, the first the prefill's
        assert prompt.decode_seconds == pytest.approx(StandIn.decode_seconds(text, 12))
    alone = measure_on_server(Server(serve(StandIn(draft=False, histograms=True)), "r"), chosen, drafting=False)
    assert alone.clock == "engine" and alone.decode_tokens_per_second() is not None


def test_a_server_without_histograms_is_timed_by_the_clients_wall_time(serve: Callable[[StandIn], str]) -> None:
    run = measure_on_server(Server(serve(StandIn(histograms=False)), "stand-in"), settings(), drafting=True)
    assert run.clock == "wall"
    assert all(
        p.decode_tokens == 12 and p.decode_seconds is not None and p.decode_seconds > 0 for p in run.modes["greedy"]
    )


def test_accept_on_running_servers_gives_the_speedup_over_the_reference(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.api.acceptance import accept

    reference = serve(StandIn(draft=False, histograms=True))
    source, dst = serve(StandIn(histograms=True)), serve(StandIn(histograms=True))
    report = accept(
        [PAIR / "draft"], source=PAIR / "draft", server=[source, dst], reference_server=reference,
        max_prompts=3, max_tokens=10, record=False,
    )  # fmt: skip
    written = report.record().to_json()
    assert written["target_alone"]["clock"] == "engine" and written["device"] is None
    (at,) = written["quantized"][0]["by_draft_tokens"]
    # the stand-ins decode alike, drafting or not: a speed-up of exactly 1, with no spread over prompts
    assert at["draft_tokens"] == 3 and at["speedup"] == {"value": 1.0, "low": 1.0, "high": 1.0}
    assert at["decode_tokens_per_second"] == written["target_alone"]["decode_tokens_per_second"]
    assert [(s.label, s.draft_tokens) for s in measured_speeds(written)] == [("source", 3), (str(PAIR / "draft"), 3)]


def test_one_server_gives_its_decode_rate_and_clock(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.measurement.prompts import read_prompts

    url = serve(StandIn(histograms=True))
    record = json.loads(run_cli("accept", "--server", url, "--max-prompts", "2", "--max-tokens", "7", "--json").stdout)
    prompts, _ = read_prompts(None, 2)  # the bundled ones
    assert record["clock"] == "engine"
    expected = 2 * 6 / sum(StandIn.decode_seconds(p, 7) for p in prompts)
    assert record["modes"]["greedy"]["decode_tokens_per_second"] == pytest.approx(expected, rel=1e-4)
    shown = run_cli("accept", "--server", url, "--max-prompts", "2", "--max-tokens", "7")
    assert f"{expected:.1f}" in shown.stdout and "engine clock" in " ".join(shown.stdout.split()), shown.stdout


def test_the_command_line_shows_each_drafts_speedup(serve: Callable[[StandIn], str]) -> None:
    reference = serve(StandIn(draft=False, histograms=True))
    source, dst = serve(StandIn(histograms=True)), serve(StandIn(histograms=True))
    draft = str(PAIR / "draft")
    done = run_cli(
        "accept", draft, "--source", draft, "--server", source, "--server", dst, "--reference-server", reference,
        "--max-prompts", "3", "--max-tokens", "8", "--no-record",
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "decode speed" in text and "speed-up" in text and "1.000 [1.000, 1.000]" in text, done.stdout
