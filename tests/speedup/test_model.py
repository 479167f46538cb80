"""The speed-up model's arithmetic: the prediction, its calibration on measured rounds, and acceptance from one
figure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from eaglequant.common.errors import InputError
from eaglequant.readback.cost import PartCost, RoundCost
from eaglequant.speedup.model import (
    SpeedupPoint,
    Timing,
    calibrate,
    calibrate_target_steps,
    geometric_acceptance,
    predict_speedup,
    step_seconds,
)
from eaglequant.speedup.target_step import TargetWeights

ROOT = Path(__file__).resolve().parents[2]


def _target(tp: int = 1) -> TargetWeights:
    return TargetWeights("t", "test", 4, 1_000_000, 1000, 2, 8, 2, 50_000.0, 10.0, False, tp)


def _draft() -> RoundCost:
    parts = (PartCost("fc", 1, 300, 600, True), PartCost("decoder", 3, 1000, 2000, True),
             PartCost("lm_head", 3, 5000, 5000, False), PartCost("embedding", 4, 100, 100, False))  # fmt: skip
    return RoundCost("vllm", "0.32.0", 3, parts, 0, 0)


# independent routing (rho = 0), so the arithmetic below is the batch-1 model's
TIMING = Timing(
    bandwidth=1e9, target_overhead_s=2e-4, draft_overhead_s=5e-5, round_overhead_s=3e-5, context=100, routing_locality=0
)


def test_the_speedup_is_acceptance_times_a_step_over_verify_and_draft() -> None:
    table = predict_speedup("d", _target(), _draft(), {1: 1.7, 3: 2.5}, TIMING)
    step = (1_000_000 + 2 * 2 * 50_000 + 1000 + 100 * 10) / 1e9 + 2e-4  # 2 experts of 8 for one token
    distinct4 = 8 * (1 - (1 - 2 / 8) ** 4)
    verify = (1_000_000 + 2 * distinct4 * 50_000 + 4 * 1000 + 100 * 10) / 1e9 + 2e-4 + 3e-5  # and the round's
    draft3 = (300 + 3 * 1000 + 3 * 5000 + 4 * 100) / 1e9 + 3 * 5e-5
    point = table.at(3)
    assert point is not None
    assert (point.step_s, point.verify_s, point.draft_s) == pytest.approx((step, verify, draft3), rel=1e-12)
    assert point.speedup == pytest.approx(2.5 * step / (verify + draft3), rel=1e-12)


def test_the_best_k_is_the_highest_speedup_and_ties_go_to_the_smaller_k() -> None:
    table = predict_speedup("d", _target(), _draft(), {1: 1.9, 2: 2.7, 3: 2.75}, TIMING)
    assert table.best_draft_tokens == max(table.points, key=lambda p: p.speedup).draft_tokens
    # no bytes cost, no draft cost: every k with the same length ties
    flat = Timing(1e30, 1e-3, 0.0, 0.0, 0, hardware=replace(TIMING.hardware, bf16=1e30))
    assert predict_speedup("d", _target(), _draft(), {2: 2.0, 4: 2.0}, flat).best_draft_tokens == 2


def test_tensor_parallelism_divides_the_target_and_the_draft_bytes() -> None:
    one = predict_speedup("d", _target(1), _draft(), {3: 2.5}, TIMING).at(3)
    eight = predict_speedup("d", _target(8), _draft(), {3: 2.5}, TIMING).at(3)
    assert one is not None and eight is not None
    assert eight.draft_s - 3 * 5e-5 == pytest.approx((one.draft_s - 3 * 5e-5) / 8, rel=1e-12)


@dataclass(frozen=True)
class Round:
    draft_tokens: int
    acceptance_length: float
    alone_seconds_per_token: float
    drafted_seconds_per_token: float


def _measured(timing: Timing, lengths: dict[int, float]) -> list[Round]:
    """What an engine that runs exactly as ``timing`` says would measure."""
    table = predict_speedup("d", _target(), _draft(), lengths, timing)
    return [Round(p.draft_tokens, p.acceptance_length, p.step_s, (p.verify_s + p.draft_s) / p.acceptance_length)
            for p in table.points]  # fmt: skip


TRUE = Timing(1e9, 3e-3, 7e-4, 4e-4, 100, routing_locality=0.4)


def test_at_one_k_calibration_scales_the_round_and_the_draft_step_in_their_stated_proportion() -> None:
    stated = Timing(1e9, 0.0, 7e-6, 4e-6, 100, routing_locality=0.4)  # the engine's proportion, 1/100 its scale
    fitted = calibrate(_target(), _draft(), _measured(TRUE, {3: 2.4}), stated, "a test run")
    assert (fitted.target_overhead_s, fitted.draft_overhead_s, fitted.round_overhead_s) == pytest.approx(
        (3e-3, 7e-4, 4e-4), rel=1e-9
    )
    assert fitted.calibrated_on == "a test run" and "fitted to a test run" in " ".join(fitted.assumptions())
    unit = Timing(1e9, 0.0, 1.0, 1.0, 100, routing_locality=0.4)
    other = calibrate(_target(), _draft(), _measured(TRUE, {3: 2.4}), unit, "x")
    assert other.round_overhead_s == other.draft_overhead_s  # another proportion: the same total a round
    assert other.round_overhead_s + 3 * other.draft_overhead_s == pytest.approx(4e-4 + 3 * 7e-4, rel=1e-9)


def test_at_several_k_calibration_fits_the_round_and_the_draft_step() -> None:
    measured = _measured(TRUE, {1: 1.6, 2: 2.1, 4: 2.6})
    fitted = calibrate(_target(), _draft(), measured, Timing(1e9, 1.0, 1.0, 1.0, 100, routing_locality=0.4), "x")
    assert (fitted.draft_overhead_s, fitted.round_overhead_s) == pytest.approx((7e-4, 4e-4), rel=1e-9)


def test_a_fit_that_cannot_be_a_cost_is_refused_naming_the_term() -> None:
    cheap = Timing(1e9, 3e-3, 7e-4, 0.0, 100, routing_locality=0.4)  # rounds that do not grow with k as stated
    flat = _measured(cheap, {1: 1.6, 3: 2.4})
    slower_at_one = [replace(flat[0], drafted_seconds_per_token=flat[0].drafted_seconds_per_token * 2), flat[1]]
    with pytest.raises(InputError, match="ms each draft step, which cannot be a cost"):
        calibrate(_target(), _draft(), slower_at_one, TRUE, "noisy.json")
    too_fast = [replace(m, alone_seconds_per_token=1e-6) for m in flat]  # the target alone faster than its bytes
    with pytest.raises(InputError, match=r"noisy.json: the fit gives .* ms each target forward"):
        calibrate(_target(), _draft(), too_fast, TRUE, "noisy.json")
    free = [replace(m, drafted_seconds_per_token=1e-6) for m in _measured(TRUE, {3: 2.4})]  # a round for nothing
    with pytest.raises(InputError, match="each round beyond its forwards"):
        calibrate(_target(), _draft(), free, TRUE, "x")


def test_calibration_predicts_other_k_on_a_model_engine() -> None:
    lengths = {1: 1.6, 2: 2.1, 3: 2.4, 4: 2.6}
    stated = Timing(1e9, 0.0, 7.0, 4.0, 100, routing_locality=0.4)
    fitted = calibrate(_target(), _draft(), _measured(TRUE, {3: 2.4}), stated, "k = 3")
    predicted = predict_speedup("d", _target(), _draft(), lengths, fitted)
    actual = predict_speedup("d", _target(), _draft(), lengths, TRUE)
    assert [p.speedup for p in predicted.points] == pytest.approx([p.speedup for p in actual.points], rel=1e-9)


def test_calibration_needs_a_measurement() -> None:
    with pytest.raises(InputError, match="no draft measured"):
        calibrate(_target(), _draft(), [], TIMING, "empty.json")


def test_geometric_acceptance_holds_the_given_figure_and_grows_with_k() -> None:
    lengths = geometric_acceptance(2.62, 3, 8)
    assert lengths[3] == pytest.approx(2.62, abs=1e-9)
    assert all(lengths[k] < lengths[k + 1] for k in range(1, 8))
    rate = lengths[1] - 1  # k = 1 accepts its one token at the per-token rate
    assert lengths[8] == pytest.approx(sum(rate**j for j in range(9)), rel=1e-9)
    assert geometric_acceptance(4.0, 3, 4)[4] == 5.0  # every token accepted
    with pytest.raises(InputError, match="must be from 1 to 4"):
        geometric_acceptance(4.5, 3, 8)


def test_no_acceptance_is_one_line() -> None:
    with pytest.raises(InputError, match="no acceptance length"):
        predict_speedup("d", _target(), _draft(), {}, TIMING)


def test_the_routing_locality_is_fitted_where_three_k_are_measured() -> None:
    from eaglequant.speedup.model import calibrate_locality

    moe = TargetWeights("t", "test", 4, 1_000_000, 1000, 2, 64, 4, 500_000.0, 10.0, False)  # experts dominate
    true = Timing(1e9, 3e-3, 7e-4, 4e-4, 100, routing_locality=0.7)
    lengths = {1: 1.6, 2: 2.1, 3: 2.4, 4: 2.6}
    table = predict_speedup("d", moe, _draft(), lengths, true, concurrency=4)
    measured = [Round(p.draft_tokens, p.acceptance_length, p.step_s, (p.verify_s + p.draft_s) / p.acceptance_length)
                for p in table.points]  # fmt: skip
    stated = Timing(1e9, 0.0, 7e-6, 4e-6, 100, routing_locality=0.2)
    fitted = calibrate_locality(moe, _draft(), measured, stated, "x", concurrency=4)
    assert fitted.routing_locality == pytest.approx(0.7)
    assert (fitted.draft_overhead_s, fitted.round_overhead_s) == pytest.approx((7e-4, 4e-4), rel=1e-6)
    assert fitted.calibrated_on == "x, routing locality 0.7 fitted"
    assert max(abs(r.error) for r in fitted.residuals) < 1e-6
    with pytest.raises(InputError, match="three k or more, not 2"):
        calibrate_locality(moe, _draft(), measured[:2], stated, "x", concurrency=4)


def test_a_forward_costs_the_larger_of_its_bytes_and_its_compute() -> None:
    dense = TargetWeights("t", "test", 4, 1_000_000, 1000, 0, 0, 0, 0.0, 10.0, False, dense_params=500_000)
    slow = replace(TIMING.hardware, bf16=1e9)  # 1 GFLOP/s: 1e6 operations a token take 1 ms
    timing = replace(TIMING, hardware=slow)
    table = predict_speedup("d", dense, _draft(), {3: 2.5}, timing, concurrency=8)
    point = table.points[0]
    read = (1_000_000 + 8 * 1000 + 8 * 100 * 10) / 1e9
    assert point.step_s == pytest.approx(max(read, 2 * 500_000 * 8 / 1e9) + 2e-4, rel=1e-12)  # compute-bound
    assert point.verify_s == pytest.approx(2 * 500_000 * 32 / 1e9 + 2e-4 + 3e-5, rel=1e-12)
    assert point.speedup <= point.acceptance_length


def test_expert_parallelism_reads_the_busiest_ranks_share() -> None:
    import math

    moe = TargetWeights("t", "test", 4, 0, 0, 1, 64, 4, 1000.0, 0.0, False, 4)
    ep = moe.on(4, 4)
    p = moe.distinct_experts(1, 8, 0.0) / 64
    busiest = 16 * p + math.sqrt(16 * p * (1 - p) * 2 * math.log(4))
    assert ep.forward_bytes(1, 0, 8) == pytest.approx(busiest * 1000.0, rel=1e-12)
    assert ep.forward_bytes(1, 0, 8) > moe.forward_bytes(1, 0, 8)  # sharded: exactly a quarter of each
    with pytest.raises(InputError, match="must divide the 64 experts"):
        moe.on(4, 3)


def test_concurrency_reads_the_weights_once_and_each_sequences_cache() -> None:
    one = predict_speedup("d", _target(), _draft(), {3: 2.5}, TIMING).points[0]
    four = predict_speedup("d", _target(), _draft(), {3: 2.5}, TIMING, concurrency=4).points[0]
    independent = 4 * 4  # rho = 0: 4 sequences of 4 tokens
    verify = (1_000_000 + 2 * 8 * (1 - (1 - 2 / 8) ** independent) * 50_000 + 16 * 1000 + 4 * 100 * 10) / 1e9
    assert four.verify_s == pytest.approx(verify + 2e-4 + 3e-5, rel=1e-12)
    assert four.step_s > one.step_s and four.draft_s == pytest.approx(one.draft_s + 3 * 4 * 100 / 1e9, rel=1e-12)


def test_a_speedup_is_at_most_its_acceptance_length_and_carries_its_interval() -> None:
    table = predict_speedup("d", _target(), _draft(), {1: 2.0, 3: 2.5}, TIMING, acceptance_interval={3: (2.2, 2.8)})
    one, three = table.points
    assert one.speedup <= 2.0 and three.speedup <= 2.5
    ratio = three.speedup / 2.5
    assert (three.low, three.high) == pytest.approx((2.2 * ratio * 0.85, min(2.8, 2.8 * ratio * 1.15)), rel=1e-12)
    assert one.low == pytest.approx(one.speedup * 0.85) and one.high <= 2.0  # no interval given: the model's
    with pytest.raises(InputError, match="must be from 1 to 4"):
        predict_speedup("d", _target(), _draft(), {3: 2.5}, TIMING, acceptance_interval={3: (2.2, 4.2)})
    with pytest.raises(InputError, match=r"acceptance length 0.5 at k = 1: must be from 1 to 2"):
        predict_speedup("d", _target(), _draft(), {1: 0.5}, TIMING)


def test_the_drafts_own_cache_is_read_each_step_for_each_sequence() -> None:
    def point(**draft: float) -> SpeedupPoint:
        table = predict_speedup("d", _target(), _draft(), {3: 2.5}, TIMING, concurrency=4, draft_tensor_parallel_size=2,
                                **draft)  # type: ignore[arg-type]  # fmt: skip
        return table.points[0]

    bare, cached = point(), point(draft_kv_bytes_per_position=64.0)
    assert cached.draft_s - bare.draft_s == pytest.approx(3 * 4 * 100 * 64.0 / 2 / 1e9, rel=1e-9)  # k, C, context
    assert cached.speedup < bare.speedup


def _bare_step(target: TargetWeights, timing: Timing, c: int) -> float:
    """A step's roofline at C sequences, by hand in float64: dense weights once, 2 of 8 experts for each of C
    independent tokens, each sequence's cache (bandwidth-bound: the test target computes nothing)."""
    experts = 8 * (1 - (1 - 2 / 8) ** c)
    return (1_000_000 + 2 * experts * 50_000 + c * 1000 + c * 100 * 10) / 1e9


def test_the_cost_a_token_is_paid_by_every_token_and_the_cost_a_sequence_once() -> None:
    timing = replace(TIMING, token_overhead_s=3e-5, sequence_overhead_s=7e-5)
    point = predict_speedup("d", _target(), _draft(), {3: 2.5}, timing, concurrency=4).points[0]
    bare = predict_speedup("d", _target(), _draft(), {3: 2.5}, TIMING, concurrency=4).points[0]
    assert point.step_s - bare.step_s == pytest.approx(4 * (3e-5 + 7e-5), rel=1e-12)
    assert point.verify_s - bare.verify_s == pytest.approx(4 * (4 * 3e-5 + 7e-5), rel=1e-12)  # k + 1 tokens each
    assert point.draft_s == bare.draft_s  # the draft's steps pay neither


def test_the_target_alone_at_several_loads_fits_its_fixed_cost_and_its_cost_a_sequence() -> None:
    stated = replace(TIMING, target_overhead_s=1.0)  # replaced by the fit
    steps = {c: _bare_step(_target(), TIMING, c) + 2e-3 + c * 4e-5 for c in (1, 4, 16, 64)}
    fitted = calibrate_target_steps(_target(), stated, steps, "a test", token_share=0.25)
    assert fitted.target_overhead_s == pytest.approx(2e-3, rel=1e-9)
    assert (fitted.token_overhead_s, fitted.sequence_overhead_s) == pytest.approx((1e-5, 3e-5), rel=1e-9)
    assert [r.concurrency for r in fitted.step_residuals] == [1, 4, 16, 64]
    assert max(abs(r.error) for r in fitted.step_residuals) < 1e-9
    assert (fitted.draft_overhead_s, fitted.round_overhead_s) == (TIMING.draft_overhead_s, TIMING.round_overhead_s)
    said = "\n".join(fitted.assumptions())
    assert "target alone at C = 16: measured" in said and "(+0.0%)" in said
    assert "fitted with the forward's fixed cost to the target alone at C = 1, 4, 16, 64" in said
    assert "not counted" in " ".join(TIMING.assumptions())  # no cost a token: said so


def test_the_target_fit_is_least_squares_with_its_residuals() -> None:
    noise = {1: 1e-4, 4: -2e-4, 16: 1.5e-4, 64: -0.5e-4}
    steps = {c: _bare_step(_target(), TIMING, c) + 2e-3 + c * 4e-5 + noise[c] for c in noise}
    fitted = calibrate_target_steps(_target(), TIMING, steps, "a test")
    xs, ys = list(noise), [2e-3 + c * 4e-5 + noise[c] for c in noise]  # what the roofline leaves, by hand
    mx, my = sum(xs) / 4, sum(ys) / 4
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    assert fitted.token_overhead_s == pytest.approx(slope, rel=1e-9) and fitted.sequence_overhead_s == 0.0
    assert fitted.target_overhead_s == pytest.approx(my - slope * mx, rel=1e-9)
    for r in fitted.step_residuals:
        hand = _bare_step(_target(), TIMING, r.concurrency) + (my - slope * mx) + r.concurrency * slope
        assert r.predicted_s == pytest.approx(hand, rel=1e-9) and r.measured_s == steps[r.concurrency]
        assert r.error == round(hand / steps[r.concurrency] - 1, 4)


def test_a_target_fit_that_cannot_be_a_cost_is_refused_naming_the_term() -> None:
    falling = {c: _bare_step(_target(), TIMING, c) + 2e-3 - c * 1e-5 for c in (1, 4, 16)}
    with pytest.raises(InputError, match=r"ms each sequence a target step runs, which cannot be a cost"):
        calibrate_target_steps(_target(), TIMING, falling, "card.json")
    steep = {c: _bare_step(_target(), TIMING, c) + c * 1e-3 - 5e-4 for c in (1, 4, 16)}  # a negative fixed cost
    with pytest.raises(InputError, match=r"card.json: the fit gives -0.5 ms each target forward"):
        calibrate_target_steps(_target(), TIMING, steep, "card.json")
    with pytest.raises(InputError, match="two concurrencies or more, not 1"):
        calibrate_target_steps(_target(), TIMING, {4: 1e-2}, "card.json")
    with pytest.raises(InputError, match="a step takes time"):
        calibrate_target_steps(_target(), TIMING, {1: 1e-2, 4: 0.0}, "card.json")


def test_the_token_share_is_fitted_to_one_drafted_round_with_the_rounds_overheads_stated() -> None:
    from eaglequant.speedup.model import calibrate_token_share

    true = replace(TRUE, token_overhead_s=3e-5, sequence_overhead_s=9e-5)  # a share of 0.25
    table = predict_speedup("d", _target(), _draft(), {3: 2.4}, true, concurrency=8)
    p = table.points[0]
    measured = [Round(3, 2.4, p.step_s, (p.verify_s + p.draft_s) / 2.4)]
    steps = {c: step_seconds(_target(), true, 1, c) for c in (1, 8, 32)}
    alone = calibrate_target_steps(_target(), TRUE, steps, "alone")  # every token pays it, until the share is fitted
    fitted = calibrate_token_share(_target(), _draft(), measured, alone, "x", concurrency=8)
    assert (fitted.token_overhead_s, fitted.sequence_overhead_s) == pytest.approx((3e-5, 9e-5), rel=1e-6)
    assert abs(fitted.residuals[0].error) < 1e-6 and fitted.measured_draft_tokens == (3,)
    dear = [replace(measured[0], drafted_seconds_per_token=measured[0].drafted_seconds_per_token * 3)]
    with pytest.raises(InputError, match="share of a target step's cost a sequence that each token pays"):
        calibrate_token_share(_target(), _draft(), dear, alone, "x", concurrency=8)
    with pytest.raises(InputError, match="fit the target first"):
        calibrate_token_share(_target(), _draft(), measured, TRUE, "x", concurrency=8)


def test_calibrate_keeps_the_target_terms_fitted_to_the_target_alone() -> None:
    true = replace(TRUE, token_overhead_s=2e-5, sequence_overhead_s=6e-5)
    steps = {c: step_seconds(_target(), true, 1, c) for c in (1, 8, 32)}
    alone = calibrate_target_steps(_target(), TRUE, steps, "alone", token_share=0.25)
    table = predict_speedup("d", _target(), _draft(), {2: 2.1, 4: 2.6}, true, concurrency=8)
    # the target alone measured slower with the drafts than the fit says: not refitted from them
    measured = [
        Round(p.draft_tokens, p.acceptance_length, 1.5 * p.step_s, (p.verify_s + p.draft_s) / p.acceptance_length)
        for p in table.points
    ]
    fitted = calibrate(_target(), _draft(), measured, alone, "x", concurrency=8)
    assert (fitted.target_overhead_s, fitted.token_overhead_s, fitted.sequence_overhead_s) == pytest.approx(
        (3e-3, 2e-5, 6e-5), rel=1e-9
    )
    assert (fitted.draft_overhead_s, fitted.round_overhead_s) == pytest.approx((7e-4, 4e-4), rel=1e-9)
    assert [r.error for r in fitted.residuals] == pytest.approx([-1 / 3, -1 / 3], abs=1e-4)  # the step predicted
