"""The two objectives of ``search``: the bytes objective writes the smallest candidate within the budget; the
speed-up objective (``--objective speedup``) keeps every candidate within the budget at some k and writes the one
:mod:`eaglequant.search.fastest` picks, priced by the cost model against the target at each load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from eaglequant.engines import get_engine
from eaglequant.layouts.head import HeadDescription
from eaglequant.readback.cost import round_cost
from eaglequant.search.budget import Budget
from eaglequant.search.candidate_loop import SearchPoint
from eaglequant.search.fastest import FastestPick, SpeedModel, allowed_acceptance, objective_target
from eaglequant.search.schedule import Loads, parse_loads
from eaglequant.speedup.draft_fit import check_draft_fits


def objective_and_loads(
    objective: str, target: str | Path | None, inputs: Path, measured: Any, concurrency: Any, tensor_parallel_size: int
) -> tuple[str | Path | None, Loads]:
    """The target the objective prices and the loads it is judged at; an option of the speedup objective given to
    another is refused."""
    speed_options = {"measured": measured, "concurrency": concurrency}
    parallel = {"tensor_parallel_size": None if tensor_parallel_size == 1 else tensor_parallel_size}
    return objective_target(objective, target, inputs, **speed_options, **parallel), parse_loads(concurrency)


def gates(
    budget: Budget, tokens: float, smallest: bool
) -> tuple[Callable[[Any], bool], Callable[[Any], bool], Callable[[Any], str]]:
    """Whether a prediction is within the budget (at k = 3), whether its candidate can still be chosen (the speedup
    objective: within the budget at some k), and its verdict in words."""
    within: Callable[[Any], bool] = lambda p: budget.within(p, tokens)  # noqa: E731
    kept: Callable[[Any], bool] = within if smallest else (lambda p: bool(allowed_acceptance(p, budget, tokens)))
    return within, kept, (lambda p: budget.judged_text(p, tokens))


def chosen_point(points: list[SearchPoint], pick: FastestPick | None, smallest: bool) -> SearchPoint | None:
    """The point written: the smallest within the budget, or the speed-up objective's pick where it pays."""
    if smallest:
        return next((p for p in points if p.within), None)
    return None if pick is None or not pick.plan.pays else points[pick.index]


def speed_model(
    head: HeadDescription,
    engines: tuple[str, ...],
    target: str | Path | None,
    parallel_measured: tuple[int, Any],
    loads: Loads,
    inputs: Path | None = None,
) -> SpeedModel | None:
    """The cost model the speedup objective prices candidates with (None: no target, the bytes objective):
    ``target``'s forwards on as many ranks as ``parallel_measured`` says, the source draft's round in the first
    targeted engine (an unquantized round reads the same in each), the terms stated or fitted to its measured
    record, the routing locality the capture at ``inputs`` measured where it did. It prices a round at each of
    ``loads`` now, so that a load it cannot predict at is refused before any candidate is converted."""
    if target is None:
        return None
    check_draft_fits(head.config, Path(target))
    engine = get_engine(engines[0])
    source = round_cost(head, engine.key, engine.release, {})
    model = SpeedModel.of(target, *parallel_measured, source, inputs)
    model.tables("source", source, {1: 1.0}, loads)
    return model
