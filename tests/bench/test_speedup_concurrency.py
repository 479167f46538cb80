"""The speed-up at concurrency, calibrated at one C (scripts/speedup_concurrency.py, eaglequant/bench/concurrency.py,
``--measured`` through ``timing_for``): on a synthetic ``accept --concurrency`` record, the target's terms fitted to
the target alone at every C and the round's at one, the other C predicted, each against a float64 hand computation.
Its arithmetic, not its accuracy, is held here (no engine runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eaglequant import inspect
from eaglequant.bench.concurrency import fit_and_predict, markdown, medians
from eaglequant.common.errors import InputError
from eaglequant.measurement.speed import alone_steps_by_concurrency, measured_speeds
from eaglequant.speedup.calibration import timing_for
from eaglequant.speedup.hardware import with_figures
from eaglequant.speedup.target_step import target_weights
from tests.conftest import FIXTURES

PAIR = FIXTURES / "trained-pair"
LOADS = (1, 2, 4, 8)
NOISE = {1: 0.01, 2: -0.02, 4: 0.015, 8: -0.005}  # the target alone's steps off the line: a real least squares
FIXED, PER_SEQUENCE, ROUND = 2e-3, 3e-4, 1.5e-3  # the truth the record is made from (seconds)
K = 3
LENGTHS = {"source": 2.4, "quantized": 2.3}
# so fast a roofline that a step's is below 1e-12 s: the terms are the overheads alone, which a hand can compute
INSTANT = with_figures(None, 1e9, {"bf16": 1e12})


def _step(c: int) -> float:
    return (FIXED + c * PER_SEQUENCE) * (1 + NOISE[c])


def _drafted_rate(c: int, length: float) -> float:
    """A round of C sequences: the target over k + 1 tokens each, the round's cost; C * length tokens."""
    round_s = FIXED + c * (K + 1) * PER_SEQUENCE + ROUND
    return c * length / round_s


def _interval(value: float) -> dict[str, float]:
    return {"value": value, "low": value * 0.9, "high": value * 1.1}


def _draft(label: str, served_as: str, scale: float = 1.0) -> dict[str, Any]:
    lossless = {"equal": 8, "prompts": 8}
    by_c = []
    for c in LOADS:
        rate = _drafted_rate(c, LENGTHS[label])
        by_c.append({"concurrency": c, "output_tokens_per_second": _interval(rate * scale),
                     "acceptance_length": LENGTHS[label], "speedup": _interval(rate * _step(c) / c),
                     "speed_problems": []})  # fmt: skip
    at_k = {"draft_tokens": K, "acceptance_length": _interval(LENGTHS[label]), "decode_tokens_per_second": None,
            "clock": None, "speedup": None, "lossless": lossless, "by_concurrency": by_c}  # fmt: skip
    return {"label": label, "served_as": served_as, "modes": {}, "lossless": lossless, "by_draft_tokens": [at_k]}


def synthetic_record(version: str, scale: float = 1.0) -> dict[str, Any]:
    """An ``accept --concurrency 1,2,4,8,16`` record of 8 prompts, made from the truth above; C = 16 is past the
    prompts, and ``scale`` scales every rate (another process, as fast or not)."""
    alone = [{"concurrency": c, "output_tokens_per_second": _interval(scale * c / _step(c)), "drift": 0.01}
             for c in LOADS]  # fmt: skip
    alone.append({"concurrency": 16, "output_tokens_per_second": _interval(1000.0), "drift": 0.0})
    settings = {"target": str(PAIR / "target"), "draft_tokens": K, "prompts": 8, "prompts_from": "test",
                "max_tokens": 32}  # fmt: skip
    return {
        "engine": "vllm", "version": version, "device": "cpu", "settings": settings,
        "source": _draft("source", "source", scale), "quantized": [_draft("quantized", "dequantized", scale)],
        "notes": [], "problems": [],
        "target_alone": {"decode_tokens_per_second": None, "clock": None, "by_concurrency": alone},
    }  # fmt: skip


def _by_hand(fit_at: int) -> tuple[float, float, dict[tuple[str, int], float]]:
    """The least-squares line through the target alone's steps, and each draft's speed-up at each C predicted from
    its round at ``fit_at``, in float64 by hand."""
    mean_c = sum(LOADS) / len(LOADS)
    mean_t = sum(_step(c) for c in LOADS) / len(LOADS)
    slope = sum((c - mean_c) * (_step(c) - mean_t) for c in LOADS) / sum((c - mean_c) ** 2 for c in LOADS)
    fixed = mean_t - slope * mean_c
    source_round = fit_at * LENGTHS["source"] / _drafted_rate(fit_at, LENGTHS["source"])
    rest = source_round - (fixed + fit_at * (K + 1) * slope)  # the round's cost beyond its verification
    predicted = {
        (name, c): length * (fixed + c * slope) / (fixed + c * (K + 1) * slope + rest)
        for name, length in LENGTHS.items()
        for c in LOADS
    }
    return fixed, slope, predicted


@pytest.fixture(scope="module")
def priced() -> tuple[Any, Any]:
    (cost,) = inspect(PAIR / "draft").round_costs
    return target_weights(PAIR / "target"), cost


def test_the_readers_give_seconds_a_token_of_one_sequence_leaving_out_a_c_past_the_prompts(priced: Any) -> None:
    _, cost = priced
    record = synthetic_record(cost.release)
    steps = alone_steps_by_concurrency(record)
    assert list(steps) == list(LOADS)  # 16 > 8 prompts: never 16 in flight
    assert all(steps[c] == pytest.approx(_step(c), rel=1e-12) for c in LOADS)
    (source, quantized) = measured_speeds(record, concurrency=4)
    assert (source.label, quantized.label) == ("source", "quantized")
    assert source.drafted_seconds_per_token == pytest.approx(4 / _drafted_rate(4, 2.4), rel=1e-12)
    drifted = synthetic_record(cost.release)
    drifted["target_alone"]["by_concurrency"][1]["drift"] = 0.3  # C = 2 moved between its runs: no result
    assert list(alone_steps_by_concurrency(drifted)) == [1, 4, 8]
    with pytest.raises(InputError, match="no steady rate at concurrency 2 within its 8 prompts"):
        measured_speeds(drifted, concurrency=2)


@pytest.mark.parametrize("fit_at", [1, 4])
def test_fitted_at_one_c_the_others_are_predicted_as_a_hand_computes(priced: Any, fit_at: int) -> None:
    target, cost = priced
    reports = [synthetic_record(cost.release, scale) for scale in (1.0, 0.5, 1.0)]  # the median: the 1.0 ones
    found = medians(reports, {})
    timing, rows = fit_and_predict(found, target, {"source": cost, "quantized": cost}, fit_at, INSTANT)
    fixed, slope, predicted = _by_hand(fit_at)
    assert timing.target_overhead_s == pytest.approx(fixed, rel=1e-6)
    assert timing.token_overhead_s == pytest.approx(slope, rel=1e-6) and timing.sequence_overhead_s == 0.0
    assert [r.concurrency for r in timing.step_residuals] == list(LOADS)
    assert [(r.draft_tokens, r.concurrency) for r in timing.residuals] == [(K, fit_at)]
    assert len(rows) == 2 * len(LOADS)
    for row in rows:
        assert row.predicted == pytest.approx(predicted[(row.draft, row.concurrency)], rel=1e-6)
        truth = _drafted_rate(row.concurrency, LENGTHS[row.draft]) * _step(row.concurrency) / row.concurrency
        assert row.measured == pytest.approx(truth, rel=1e-12)
        assert row.fitted == (row.draft == "source" and row.concurrency == fit_at)
        assert row.each_call == pytest.approx((truth, truth, truth))  # every process's own rates, alone and drafted
    table = markdown(timing, rows, found, fit_at)
    assert f"| source | 3 | {fit_at} (fitted here) |" in table
    assert "the round's to the source draft at C = " + str(fit_at) + " only" in table


def test_measured_fits_the_target_at_every_c_and_the_round_at_one(priced: Any, tmp_path: Path) -> None:
    target, cost = priced
    path = tmp_path / "accept.json"
    path.write_text(json.dumps(synthetic_record(cost.release)))
    fitted = timing_for(target, cost, path, hardware=INSTANT)
    fixed, slope, _ = _by_hand(1)
    assert fitted.target_overhead_s == pytest.approx(fixed, rel=1e-6)
    assert fitted.token_overhead_s == pytest.approx(slope, rel=1e-6)
    assert fitted.calibrated_on == (
        "accept.json: the target forward's to the target alone at C = 1, 2, 4, 8, the round's to the source draft "
        "at C = 1 only"
    )
    assert [r.concurrency for r in timing_for(target, cost, path, hardware=INSTANT, fit_concurrency=4).residuals] == [4]
    with pytest.raises(InputError, match="no steady rate of the target alone at C = 16"):
        timing_for(target, cost, path, hardware=INSTANT, fit_concurrency=16)
    with pytest.raises(InputError, match="fitting at concurrency 4 needs a measurement"):
        timing_for(target, cost, None, hardware=INSTANT, fit_concurrency=4)
    one = synthetic_record(cost.release)
    for at in one["target_alone"]["by_concurrency"][1:]:
        at["drift"] = 0.5  # only C = 1 held still: no cost a sequence to fit
    path.write_text(json.dumps(one))
    with pytest.raises(InputError, match=r"measured at 1 concurrencies \(steady\), and fitting at C = 1 needs two"):
        timing_for(target, cost, path, hardware=INSTANT, fit_concurrency=1)
