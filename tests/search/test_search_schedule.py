"""The k for every load (:mod:`eaglequant.search.schedule`): the loads as given, each load's k (0 where no k beats
the target alone), vLLM's ranges, the weighted pick and a tie within the model's error, over tables built here."""

from __future__ import annotations

import pytest

from eaglequant.common.errors import InputError
from eaglequant.search.schedule import Loads, parse_loads, ranked, schedule_ranges, serving_plan
from eaglequant.speedup.model import SpeedupPoint, SpeedupTable, Timing
from eaglequant.speedup.target_step import TargetWeights

TARGET = TargetWeights("t", "config.json", 2, 1000, 64, 0, 0, 0, 10.0, 10.0, False, 1)
TIMING = Timing(1e12, 1e-4, 1e-4, 1e-4)


def table(draft: str, concurrency: int, speedups: dict[int, float], error: float = 0.12) -> SpeedupTable:
    """A table whose k have the given speed-ups, each within +-``error`` of its point."""
    points = tuple(
        SpeedupPoint(k, 1.0 + k / 2, 1e-3, 1e-3, 1e-4, s, s * (1 - error), s * (1 + error))
        for k, s in sorted(speedups.items())
    )
    return SpeedupTable(draft, TARGET, TIMING, points, "given", concurrency)


@pytest.mark.parametrize(
    ("given", "loads", "weights"),
    [
        (None, (1,), (1.0,)),
        ("4", (4,), (1.0,)),
        ("1,2,4", (1, 2, 4), (1 / 3, 1 / 3, 1 / 3)),
        ("1-64", (1, 2, 4, 8, 16, 32, 64), (1 / 7,) * 7),
        ("16:1,4:3", (4, 16), (0.75, 0.25)),
        ({8: 2.0, 1: 2.0}, (1, 8), (0.5, 0.5)),
        ([2, 1], (1, 2), (0.5, 0.5)),
    ],
)
def test_loads_are_parsed_sorted_and_their_weights_sum_to_one(given: object, loads: tuple, weights: tuple) -> None:  # type: ignore[type-arg]
    parsed = parse_loads(given)  # type: ignore[arg-type]
    assert parsed.concurrency == loads and parsed.weights == pytest.approx(weights)


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("1,x", "'x' is not a concurrency"),
        ("0,2", "0 is not a concurrency from 1"),
        ("2,2", "a load is given twice"),
        ("1:0.5,2", "weigh every load or none"),
        ("1:0,2:1", "a weight must be a positive number"),
        ("1-6", "a range of powers of two"),
        ("8-2", "a range of powers of two"),
        ("", "is not a concurrency"),
    ],
)
def test_bad_loads_are_one_line_naming_the_flag(given: str, why: str) -> None:
    with pytest.raises(InputError, match=why) as raised:
        parse_loads(given)
    assert "concurrency=" in str(raised.value) and "\n" not in str(raised.value)


def test_the_ranges_start_at_1_hold_each_k_up_to_the_next_load_and_merge_equal_neighbours() -> None:
    assert schedule_ranges([(1, 3), (2, 3), (4, 2), (8, 0), (16, 0)]) == ((1, 3, 3), (4, 7, 2), (8, 16, 0))
    assert schedule_ranges([(4, 2), (16, 1)]) == ((1, 15, 2), (16, 16, 1))  # the lowest load's k from batch 1
    assert schedule_ranges([(8, 3)]) == ((1, 8, 3),)


def test_a_load_where_no_k_beats_the_target_alone_does_not_speculate() -> None:
    loads = parse_loads("1,4,16")
    tables = {
        1: table("a", 1, {1: 1.3, 2: 1.5, 3: 1.4}),
        4: table("a", 4, {1: 1.1, 2: 1.05, 3: 0.9}),
        16: table("a", 16, {1: 0.97, 2: 0.9, 3: 0.8}),  # its interval reaches past 1: the point decides
    }
    plan = serving_plan("a", tables, loads)
    assert [c.draft_tokens for c in plan.choices] == [2, 1, 0]
    assert plan.speedup == pytest.approx((1.5 + 1.1 + 1.0) / 3)  # a load without speculation counts 1
    assert plan.low == pytest.approx((1.5 * 0.88 + 1.1 * 0.88 + 1.0) / 3)
    assert plan.schedule == ((1, 3, 2), (4, 15, 1), (16, 16, 0))
    assert plan.pays and plan.served_draft_tokens == 2  # equal weights: the lowest load that speculates
    slow = serving_plan("a", {1: table("a", 1, {1: 0.8, 2: 0.816})}, parse_loads(None))
    assert not slow.pays and slow.speedup == 1.0 and slow.choices[0].draft_tokens == 0


def test_the_weights_choose_the_draft_and_the_single_k_an_engine_serves() -> None:
    # a: fast alone, slow in a crowd; b: the other way round
    a = {1: table("a", 1, {3: 1.6}, 0.01), 16: table("a", 16, {1: 1.02}, 0.01)}
    b = {1: table("b", 1, {2: 1.3}, 0.01), 16: table("b", 16, {2: 1.2}, 0.01)}
    for given, winner in (("1:0.9,16:0.1", "a"), ("1:0.1,16:0.9", "b")):
        plans = [serving_plan(name, tables, parse_loads(given)) for name, tables in (("a", a), ("b", b))]
        ranking = ranked(plans)
        assert plans[ranking.pick].draft == winner and not ranking.tied
    heavy = serving_plan("a", a, Loads((1, 16), (0.2, 0.8)))
    assert heavy.served_draft_tokens == 1  # the heaviest load's k


def test_a_tie_within_the_model_error_goes_to_the_fewest_bytes_and_is_named() -> None:
    loads = parse_loads(None)
    small, dear, far = (
        serving_plan(name, {1: table(name, 1, {2: s})}, loads)
        for name, s in (("small", 1.50), ("dear", 1.55), ("far", 1.2))
    )
    ranking = ranked([small, dear, far])  # fewest bytes first
    assert ranking.top == 1 and ranking.pick == 0 and ranking.tie_broken and ranking.tied == (0,)
    apart = ranked([far, dear])  # 1.2 x 1.12 < 1.55 x 0.88: no overlap
    assert apart.pick == 1 and apart.tied == () and not apart.tie_broken and apart.runner_up == 0
    slow = serving_plan("slow", {1: table("slow", 1, {1: 0.99})}, loads)  # does not pay: never tied in
    assert ranked([slow, dear]).tied == ()
    slower = serving_plan("slower", {1: table("slower", 1, {1: 0.8, 2: 0.816})}, loads)
    assert ranked([slower, slow]).top == 1  # where none pays, the highest predicted is named
