"""A sequential search stops predicting a candidate at the first planned look whose wider interval settles its
verdict, and picks what the search without looks picks; the looks' intervals are Student-t at 5% / looks."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglequant.measurement.statistics import Interval, t_quantile
from eaglequant.search.sequential import SequentialPlan, planned_looks, t_quantile_at, widened
from eaglequant.search.smallest import search
from tests.conftest import FIXTURES

PAIR = FIXTURES / "trained-pair"


def test_the_looks_double_up_to_all_the_sequences() -> None:
    assert planned_looks(24) == (2, 4, 8, 16, 24)
    assert planned_looks(16) == (2, 4, 8, 16) and planned_looks(3) == (2, 3) and planned_looks(1) == (1,)


@pytest.mark.parametrize(("df", "alpha", "quantile"), [(1, 0.01, 63.65674), (3, 0.0125, 5.39195), (23, 0.01, 2.80734)])
def test_the_t_quantile_at_any_error_rate(df: int, alpha: float, quantile: float) -> None:
    assert t_quantile_at(df, alpha) == pytest.approx(quantile, abs=1e-4)  # scipy.stats.t.ppf(1 - alpha / 2, df)
    assert t_quantile_at(df, 0.05) == pytest.approx(t_quantile(df), rel=1e-3)


def test_an_interim_look_settles_only_what_its_wider_interval_decides() -> None:
    plan = SequentialPlan.of(24)  # 5 looks: 99% intervals at 2, 4, 8 and 16 sequences
    assert plan.interim_confidence == 0.99
    close = Interval(-0.01, -0.03, 0.01)  # within a 0.05 budget at 95%; at 99% on 7 df too
    assert widened(close, 8, 0.01).low == pytest.approx(-0.01 - 0.02 * 3.49948 / t_quantile(7), rel=1e-4)
    assert plan.settled(close, 8, 0.05) is True
    assert plan.settled(Interval(-0.3, -0.35, -0.25), 8, 0.05) is False
    assert plan.settled(Interval(-0.04, -0.08, 0.0), 8, 0.05) is None  # straddles the budget: go on
    assert plan.settled(close, 6, 0.05) is None  # no look after 6
    assert plan.settled(close, 24, 0.05) is None  # the last look is the one gate's
    assert plan.settled(Interval(0.0, 0.0, 0.0), 4, 0.05) is None  # no spread settles nothing
    assert plan.settled(Interval(0.0, -math.inf, math.inf), 2, 0.05) is None


def _search(inputs: Path, dst: Path, budget: str, sequential: bool, **settings: object):  # type: ignore[no-untyped-def]
    return search(
        PAIR / "draft", dst, inputs=inputs, max_acceptance_drop=budget, max_draft_tokens=3, sequential=sequential,
        overwrite=True, **settings,
    )  # fmt: skip


def test_sequential_verdicts_take_3x_fewer_positions_for_the_same_pick(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    """With a budget the smallest candidate meets by far, its verdict settles at an early look (4 or 8 of 24)."""
    inputs = pair_captured("trained-pair")
    found = {seq: _search(inputs, tmp_path / str(seq), "1.0", seq, schemes=["nvfp4"]) for seq in (True, False)}
    early, every = found[True], found[False]
    assert early.chosen is not None and every.chosen is not None
    assert early.chosen.candidate.label == every.chosen.candidate.label
    assert all(point.row().sequences_predicted == 24 for point in every.points if point.prediction is not None)
    assert early.chosen.row().sequences_predicted in (4, 8)
    assert every.positions_predicted >= 3 * early.positions_predicted
    record = early.record()
    assert record.sequential is not None and record.sequential.looks == (2, 4, 8, 16, 24)
    assert "at most 5%" in record.sequential.text and every.record().sequential is None


@pytest.mark.slow
def test_at_the_readme_budget_the_sequential_pick_is_the_same(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    inputs = pair_captured("trained-pair")
    found = {seq: _search(inputs, tmp_path / str(seq), "0.05", seq) for seq in (True, False)}
    assert found[True].chosen is not None and found[False].chosen is not None
    assert found[True].chosen.candidate.label == found[False].chosen.candidate.label
    assert found[True].positions_predicted <= found[False].positions_predicted
