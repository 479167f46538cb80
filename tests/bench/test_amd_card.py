"""The AMD card on paper (scripts/amd_card_table.py): the target's terms fitted to the no-speculation column, the
speculation's at one concurrency of the BF16 column, predicting the others and the FP8 column; its arithmetic, not
its accuracy, is held here."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.bench.speedup import AMD_CARD, AMD_GPUS, amd_card, fit_points, mxfp4_kimi
from eaglequant.common.errors import InputError
from eaglequant.speedup.model import geometric_acceptance

KIMI = Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "kimi-k2.5"


@pytest.fixture(scope="module")
def fitted() -> tuple:
    return amd_card(KIMI, fit_at=4)


def _steps() -> dict[int, float]:
    return {c: c / (rates[0] * AMD_GPUS) for c, rates in AMD_CARD.items()}


def test_the_target_terms_are_fitted_to_the_no_speculation_column_alone(fitted: tuple) -> None:
    timing, rows = fitted
    steps = _steps()
    assert [r.concurrency for r in timing.step_residuals] == list(AMD_CARD)
    for row, residual in zip(rows, timing.step_residuals, strict=True):
        assert residual.measured_s == pytest.approx(steps[row.concurrency], rel=1e-12)
        assert row.alone_predicted == pytest.approx(row.concurrency / residual.predicted_s / AMD_GPUS, rel=1e-12)
    # least squares: the residuals sum to zero and are uncorrelated with C (the normal equations)
    errors = [r.predicted_s - r.measured_s for r in timing.step_residuals]
    assert sum(errors) == pytest.approx(0.0, abs=1e-12)
    assert sum(c * e for c, e in zip(AMD_CARD, errors, strict=True)) == pytest.approx(0.0, abs=1e-10)
    per_sequence = timing.token_overhead_s + timing.sequence_overhead_s
    assert (timing.target_overhead_s, per_sequence) == pytest.approx((10.23e-3, 97.12e-6), rel=1e-3)


def test_the_token_share_is_fitted_at_one_concurrency_of_the_bf16_column(fitted: tuple) -> None:
    timing, rows = fitted
    four = rows[0]
    length = geometric_acceptance(2.62, 3, 6)[6]
    round_s = four.bf16_predicted.verify_s + four.bf16_predicted.draft_s
    assert round_s == pytest.approx(length * 4 / (157.0 * AMD_GPUS), rel=1e-9)  # the BF16 round at C = 4, exactly
    share = timing.token_overhead_s / (timing.token_overhead_s + timing.sequence_overhead_s)
    assert share == pytest.approx(0.261, abs=1e-3)
    (residual,) = timing.residuals  # the speed-up's error there is the step's: the step is predicted, not measured
    assert (residual.draft_tokens, residual.concurrency) == (6, 4)
    assert residual.error == pytest.approx(timing.step_residuals[0].error, abs=1e-4)
    assert (timing.round_overhead_s, timing.draft_overhead_s) == (1e-4, 1.25e-4)  # stated, not fitted


def test_the_predicted_speedup_falls_from_c4_to_c64_with_the_cost_a_token(fitted: tuple) -> None:
    _, rows = fitted
    bf16 = [round(r.bf16_predicted.speedup, 2) for r in rows]
    fp8 = [round(r.fp8_predicted.speedup, 2) for r in rows]
    assert bf16 == [1.99, 1.84, 1.77, 1.84, 1.94]  # scripts/amd_card_table.py's output
    assert fp8 == [2.04, 1.88, 1.80, 1.86, 1.96]
    assert rows[-1].bf16_predicted.speedup < rows[0].bf16_predicted.speedup
    assert all(r.fp8_predicted.speedup > r.bf16_predicted.speedup for r in rows)  # FP8 ahead, as measured
    _, before = amd_card(KIMI, fit_at=4, per_token=False)  # without it the speed-up rose with C
    assert [round(r.bf16_predicted.speedup, 2) for r in before] == [1.90, 1.79, 1.76, 1.90, 2.18]


def test_every_concurrency_is_predicted_with_the_same_terms(fitted: tuple) -> None:
    _, rows = fitted
    length = geometric_acceptance(2.62, 3, 6)[6]
    assert [r.concurrency for r in rows] == list(AMD_CARD)
    for row in rows:
        for point in (row.bf16_predicted, row.fp8_predicted):
            assert point.acceptance_length == pytest.approx(length, rel=1e-12)
            assert point.speedup == pytest.approx(length * point.step_s / (point.verify_s + point.draft_s), rel=1e-9)
            assert point.low < point.speedup < point.high <= length
        assert row.alone_predicted == pytest.approx(row.concurrency / row.bf16_predicted.step_s / AMD_GPUS, rel=1e-12)
        assert row.fp8_predicted.draft_s < row.bf16_predicted.draft_s  # the FP8 draft reads fewer bytes
    steps = [r.bf16_predicted.step_s for r in rows]
    assert steps == sorted(steps)  # a step at a larger batch reads more experts


def test_the_target_is_mxfp4_shaped() -> None:
    weights = mxfp4_kimi(KIMI, 4)
    assert weights.expert_bytes == 3 * 7168 * 2048 * 4.25 / 8
    assert (weights.expert_compute, weights.dense_compute, weights.tensor_parallel_size) == ("fp4", "bf16", 4)
    assert weights.expert_params == 3 * 7168 * 2048 and weights.dense_params > 0


def test_what_the_card_refutes_is_refused_naming_the_term() -> None:
    """Every token paying the whole cost a sequence (share 1) leaves a C = 4 round less than its forwards; so does
    independent routing (rho = 0), whatever the share, and without the cost a token."""
    with pytest.raises(InputError, match="ms each round beyond its forwards, which cannot be a cost"):
        amd_card(KIMI, fit_at=4, token_share=1.0)
    with pytest.raises(InputError, match="share of a target step's cost a sequence that each token pays"):
        amd_card(KIMI, fit_at=4, locality=0.0)
    with pytest.raises(InputError, match="ms each round beyond its forwards, which cannot be a cost"):
        amd_card(KIMI, fit_at=4, locality=0.0, per_token=False)


def test_the_share_moves_least_where_a_round_pays_it_most() -> None:
    """1% of the fitted round moves the share by 0.01 x round / (C k x the cost a sequence): a hand's arithmetic,
    smaller at every larger C; each fit point's errors are amd_card's fitted there."""
    points = fit_points(KIMI)
    assert [p.concurrency for p in points] == list(AMD_CARD)
    length = geometric_acceptance(2.62, 3, 6)[6]
    for point in points:
        timing, rows = amd_card(KIMI, fit_at=point.concurrency)
        per_sequence = timing.token_overhead_s + timing.sequence_overhead_s
        bf16_rate = AMD_CARD[point.concurrency][1]
        round_s = length * point.concurrency / (bf16_rate * AMD_GPUS)
        by_hand = 0.01 * round_s / (point.concurrency * 6 * per_sequence)
        assert point.share_per_percent == pytest.approx(by_hand, rel=1e-9)
        assert timing.token_share_per_percent == point.share_per_percent
        assert point.worst_bf16 == max(abs(r.bf16_predicted.speedup / r.bf16_measured - 1) for r in rows)
    spreads = [p.share_per_percent for p in points]
    assert spreads == sorted(spreads, reverse=True)
    assert "moves by 0.015 for each 1% the round it was fitted to is off" in " ".join(
        amd_card(KIMI, fit_at=64)[0].assumptions()
    )
