"""The AMD card on paper (scripts/amd_card_table.py): the model fitted at one concurrency of the card's BF16 column
predicts the others and the FP8 column; its arithmetic, not its accuracy, is held here."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.bench.speedup import AMD_CARD, AMD_GPUS, amd_card, mxfp4_kimi
from eaglequant.common.errors import InputError
from eaglequant.speedup.model import geometric_acceptance

KIMI = Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "kimi-k2.5"


@pytest.fixture(scope="module")
def fitted() -> tuple:
    return amd_card(KIMI, fit_at=4)


def test_the_fit_reproduces_the_fitted_concurrency_exactly(fitted: tuple) -> None:
    timing, rows = fitted
    four = rows[0]
    assert four.concurrency == 4
    assert four.alone_predicted == pytest.approx(82.7, rel=1e-9)  # the target's overhead fitted to it
    assert four.bf16_predicted.speedup == pytest.approx(157.0 / 82.7, rel=1e-9)  # the round's fitted to it
    (residual,) = timing.residuals
    assert (residual.draft_tokens, residual.concurrency, residual.error) == (6, 4, 0.0)
    assert timing.measured_draft_tokens == (6,) and timing.calibrated_on == "the AMD card's BF16 draft at C = 4"


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


def test_independent_routing_cannot_explain_the_card() -> None:
    """At rho = 0 a C = 4, k = 6 verification reads so many experts that the card's 1.90x leaves a round less than
    its forwards: the fit is refused, naming the term."""
    with pytest.raises(InputError, match="ms each round beyond its forwards, which cannot be a cost"):
        amd_card(KIMI, fit_at=4, locality=0.0)
