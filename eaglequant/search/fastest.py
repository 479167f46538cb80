"""``search --objective speedup``: the candidate and the k that make serving fastest, within the budget.

Every candidate is predicted (a cheaper draft that keeps more acceptance can lose to a dearer one, so bytes alone
do not order them), each for every k from one chain. At each k where a candidate's change in acceptance against the
source is within the budget (the same gate as at k = 3, on that k's paired difference), the cost model
(:mod:`eaglequant.speedup.model`) predicts its speed-up over the target alone from its predicted acceptance length
and what a round of it reads; the highest wins, with the runner-up (the best other candidate) named beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.readback.cost import RoundCost
from eaglequant.record.search import SearchSpeedup, SpeedupAt
from eaglequant.search.budget import Budget
from eaglequant.speedup.model import SpeedupTable, Timing, predict_speedup
from eaglequant.speedup.target_step import TargetWeights

OBJECTIVES = ("bytes", "speedup")


def objective_target(objective: str, target: str | Path | None, inputs: Path) -> str | Path | None:
    """The target whose forwards the objective prices: None for the bytes objective; for the speedup objective the
    one given, else the one the capture at ``inputs`` records where it is a local directory. An objective that is
    not one, or the speedup objective with no target known, is refused."""
    if objective not in OBJECTIVES:
        raise InputError(words(given("objective", objective), f": not one of {', '.join(OBJECTIVES)}"))
    if objective != "speedup":
        return None
    found = target if target is not None else _recorded_target(inputs)
    if found is None:
        raise InputError(
            words(given("objective", objective), " prices the target's forwards, and no target is known"),
            hint="give the target's checkpoint directory or config.json: --target PATH",
        )
    return found


def _recorded_target(inputs: Path) -> Path | None:
    """The target the capture at ``inputs`` records, where it is a local directory (None: it is not)."""
    from eaglequant.draft.capture_file import read_provenance

    if not inputs.is_file():
        return None
    recorded = read_provenance(inputs, "inputs").target
    return Path(recorded) if recorded and Path(recorded).is_dir() else None


@dataclass(frozen=True)
class SpeedModel:
    """What the objective prices each candidate against: the target, the model's terms, the source's round."""

    target: TargetWeights
    timing: Timing
    target_given: str
    source_cost: RoundCost

    @classmethod
    def of(
        cls, target: str | Path, tensor_parallel_size: int, measured: str | Path | None, source: RoundCost
    ) -> SpeedModel:
        from eaglequant.speedup.calibration import timing_for
        from eaglequant.speedup.target_step import target_weights

        weights = target_weights(Path(target), tensor_parallel_size)
        timing = timing_for(weights, source, None if measured is None else Path(measured))
        return cls(weights, timing, str(target), source)

    def table(self, name: str, cost: RoundCost, acceptance: dict[int, float]) -> SpeedupTable:
        return predict_speedup(name, self.target, cost, acceptance, self.timing, "predicted on the captured inputs")


@dataclass(frozen=True)
class FastestPick:
    """The pick: a search point, its table at every k the budget allows, and what it beat."""

    index: int  # of the point among the search's points
    engine: str  # the engine release whose round the pick's bytes are priced in
    table: SpeedupTable
    runner_up: tuple[str, int, float] | None  # label, k, speed-up
    source: SpeedupTable

    @property
    def draft_tokens(self) -> int:
        return self.table.best_draft_tokens

    @property
    def speedup(self) -> float:
        return self.table.best.speedup

    def text(self) -> str:
        runner = (
            "no runner-up"
            if self.runner_up is None
            else (f"runner-up {self.runner_up[0]} at k = {self.runner_up[1]}, {self.runner_up[2]:.3f}×")
        )
        return (
            f"the fastest within the budget: {self.table.draft} at k = {self.draft_tokens}, predicted "
            f"{self.speedup:.3f}× the target alone ({runner}; the source draft {self.source.best.speedup:.3f}× at "
            f"k = {self.source.best_draft_tokens})"
        )

    def record(self, model: SpeedModel) -> SearchSpeedup:
        points = tuple(
            SpeedupAt(p.draft_tokens, round(p.acceptance_length, 4), round(p.speedup, 4)) for p in self.table.points
        )
        runner = self.runner_up
        return SearchSpeedup(
            self.engine,
            model.target_given,
            model.target.tensor_parallel_size,
            self.draft_tokens,
            round(self.speedup, 4),
            points,
            None if runner is None else runner[0],
            None if runner is None else runner[1],
            None if runner is None else round(runner[2], 4),
            self.source.best_draft_tokens,
            round(self.source.best.speedup, 4),
            tuple(self.table.assumptions),
        )


def allowed_acceptance(prediction: Any, budget: Budget, tokens: float) -> dict[int, float]:
    """k -> the candidate's predicted acceptance length, at each k where its change against the source is within
    the budget."""
    if prediction.quantized_table is None:
        return {}
    return {
        row.draft_tokens: row.quantized.value
        for row in prediction.by_draft_tokens
        if budget.change_within(row.difference, tokens)
    }


def fastest(
    points: Sequence[Any], budget: Budget, tokens: float, model: SpeedModel, source: dict[int, float]
) -> FastestPick | None:
    """The point and k of the highest predicted speed-up within the budget (None: no candidate is within it at any
    k); ties go to the fewer bytes (points come smallest first)."""
    tables = []
    for index, point in enumerate(points):
        if point.prediction is None or point.candidate.round_cost is None:
            continue
        cost = point.candidate.round_cost
        allowed = allowed_acceptance(point.prediction, budget, tokens)
        if allowed:
            tables.append((index, cost.engine_release, model.table(point.candidate.label, cost, allowed)))
    if not tables:
        return None
    ranked = sorted(tables, key=lambda entry: -entry[2].best.speedup)
    (index, engine, best), rest = ranked[0], [entry[2] for entry in ranked[1:]]
    runner = None if not rest else (rest[0].draft, rest[0].best_draft_tokens, rest[0].best.speedup)
    return FastestPick(index, engine, best, runner, model.table("source", model.source_cost, source))
