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

from eaglequant.common.errors import InputError, given, suggested, words
from eaglequant.readback.cost import RoundCost
from eaglequant.record.search import LoadAt, SearchSpeedup, SpeedupAt
from eaglequant.search.budget import Budget
from eaglequant.search.schedule import LoadChoice, Loads, ScheduleRange, ServingPlan, ranked, serving_plan
from eaglequant.speedup.model import SpeedupPoint, SpeedupTable, Timing, predict_speedup
from eaglequant.speedup.target_step import TargetWeights

OBJECTIVES = ("bytes", "speedup")


def objective_target(
    objective: str, target: str | Path | None, inputs: Path, **speed_options: object
) -> str | Path | None:
    """The target whose forwards the objective prices: None for the bytes objective; for the speedup objective the
    one given, else the one the capture at ``inputs`` records where it is a local directory. An objective that is
    not one, the speedup objective with no target known, or one of ``speed_options`` (name -> value; None: not
    given) or a target given to the bytes objective, which prices no speed-up, is refused."""
    if objective not in OBJECTIVES:
        raise InputError(words(given("objective", objective), f": not one of {', '.join(OBJECTIVES)}"))
    if objective != "speedup":
        _refuse_speed_options(objective, {"target": target, **speed_options})
        return None
    found = target if target is not None else _recorded_target(inputs)
    if found is None:
        raise InputError(
            words(given("objective", objective), " prices the target's forwards, and no target is known"),
            hint="give the target's checkpoint directory or config.json: --target PATH",
        )
    return found


def _refuse_speed_options(objective: str, options: dict[str, object]) -> None:
    """The first of ``options`` given (not None) refused: only the speedup objective reads them."""
    name = next((name for name, value in options.items() if value is not None), None)
    if name is None:
        return
    value = options[name]
    raise InputError(
        words(given(name, value if isinstance(value, (int, str)) else str(value)),
              ": only ", suggested("objective", "speedup"), f" uses it, and the objective is {objective!r}"),
        hint="predict the speed-up with that objective, or leave the option out",
    )  # fmt: skip


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
        cls,
        target: str | Path,
        tensor_parallel_size: int,
        measured: str | Path | None,
        source: RoundCost,
        inputs: Path | None = None,
    ) -> SpeedModel:
        """The model for ``target``; its routing locality the one the capture at ``inputs`` measured from the
        target's router where it did (on the target's own experts and k), else stated."""
        from eaglequant.speedup.calibration import timing_for
        from eaglequant.speedup.locality import captured_locality, with_measured
        from eaglequant.speedup.model import ROUTING_LOCALITY
        from eaglequant.speedup.target_step import target_weights

        weights = target_weights(Path(target), tensor_parallel_size)
        locality = None if inputs is None else captured_locality(inputs, weights)
        rho = ROUTING_LOCALITY if locality is None else locality.estimate
        timing = timing_for(weights, source, None if measured is None else Path(measured), routing_locality=rho)
        return cls(weights, with_measured(timing, locality), str(target), source)

    def table(self, name: str, cost: RoundCost, acceptance: dict[int, float], concurrency: int = 1) -> SpeedupTable:
        return predict_speedup(
            name,
            self.target,
            cost,
            acceptance,
            self.timing,
            "predicted on the captured inputs",
            concurrency=concurrency,
        )

    def tables(
        self, name: str, cost: RoundCost, acceptance: dict[int, float], loads: Loads
    ) -> tuple[SpeedupTable, ...]:
        """``name``'s table at each of ``loads``."""
        return tuple(self.table(name, cost, acceptance, c) for c in loads.concurrency)


@dataclass(frozen=True)
class FastestPick:
    """The pick: a search point, its plan (the k at each load) and tables, what it beat or tied with, and the source
    draft's plan. ``plan.pays`` False: no candidate beats the target alone at any load, so nothing is written."""

    index: int  # of the point among the search's points
    engine: str  # the engine release whose round the pick's bytes are priced in
    tables: tuple[SpeedupTable, ...]  # the pick's, one a load, in the loads' order
    plan: ServingPlan
    loads: Loads
    runner_up: ServingPlan | None
    tied: tuple[ServingPlan, ...]  # whose interval overlaps the highest's, fewest bytes first
    highest: ServingPlan | None  # the highest predicted, where the tie went to fewer bytes (None: the pick is)
    source: ServingPlan
    source_table: SpeedupTable  # the source draft's at the first load

    @property
    def table(self) -> SpeedupTable:
        """The pick's table at the first load."""
        return self.tables[0]

    @property
    def draft_tokens(self) -> int:
        return self.plan.served_draft_tokens

    @property
    def speedup(self) -> float:
        return self.plan.speedup

    @property
    def schedule(self) -> tuple[ScheduleRange, ...]:
        """vLLM's ``num_speculative_tokens_per_batch_size``; empty where one k serves every load (vLLM's dynamic
        speculation costs its full CUDA graphs, so it is written only where the k changes)."""
        ranges = self.plan.schedule
        return ranges if len(ranges) > 1 else ()

    def text(self) -> str:
        at = self.loads.text
        if not self.plan.pays:
            where = "this load" if len(self.loads.concurrency) == 1 else "any of these loads"
            return (
                f"do not speculate at {where}: no candidate's predicted speed-up beats the target alone at {at} "
                f"(the fastest within the budget, {self.plan.draft}, at k = {self.table.best_draft_tokens} predicted "
                f"{_point_text(self.table.best)}; {self._source_text()})"
            )
        return f"the fastest within the budget at {at}: {self.plan.draft}{self._ks_text()}{self._rest_text()}"

    def _ks_text(self) -> str:
        if len(self.loads.concurrency) == 1:
            return f" at k = {self.draft_tokens}, predicted {self.plan.interval_text()} the target alone"
        ks = ", ".join(
            f"k = {c.draft_tokens} at {c.concurrency}" + (" (do not speculate at this load)" if not c.point else "")
            for c in self.plan.choices
        )
        return f", predicted {self.plan.interval_text()} the target alone, weighted over the loads; {ks}"

    def _rest_text(self) -> str:
        if not self.tied:
            runner = self.runner_up
            rest = "no runner-up" if runner is None else f"runner-up {runner.draft}{self._at(runner)}"
            return f" ({rest}; {self._source_text()})"
        names = ", ".join(plan.draft for plan in self.tied)
        broken = (
            f"broken by the fewest bytes a round (the highest predicted: {self.highest.draft}{self._at(self.highest)})"
            if self.highest is not None
            else "and it reads the fewest bytes a round of them"
        )
        return (
            f"; a tie within the model's error with {names} (their intervals overlap the highest's), {broken}; "
            f"{self._source_text()}"
        )

    def _at(self, plan: ServingPlan) -> str:
        k = f" at k = {plan.served_draft_tokens}" if len(self.loads.concurrency) == 1 else ""
        return f"{k}, {plan.interval_text()}"

    def _source_text(self) -> str:
        if self.source.pays:
            return f"the source draft {self.source.interval_text()} at k = {self.source.served_draft_tokens}"
        best = self.source_table.best
        return f"the source draft does not beat it either: at best {_point_text(best)} at k = {best.draft_tokens}"

    def record(self, model: SpeedModel) -> SearchSpeedup:
        runner = self.runner_up
        return SearchSpeedup(
            self.engine,
            model.target_given,
            model.target.tensor_parallel_size,
            self.draft_tokens,
            round(self.speedup, 4),
            _speedups_at(self.table),
            None if runner is None else runner.draft,
            None if runner is None else runner.served_draft_tokens,
            None if runner is None else round(runner.speedup, 4),
            self.source.served_draft_tokens,
            round(self.source.speedup, 4),
            tuple(self.table.assumptions),
            round(self.plan.low, 4),
            round(self.plan.high, 4),
            tuple(_load_at(choice, table) for choice, table in zip(self.plan.choices, self.tables, strict=True)),
            self.schedule,
            tuple(plan.draft for plan in self.tied),
            None if self.highest is None else self.highest.draft,
            self.plan.pays,
        )


def _point_text(point: SpeedupPoint) -> str:
    low, high = (point.speedup if end is None else end for end in (point.low, point.high))
    return f"{point.speedup:.3f}× [{low:.3f}, {high:.3f}]"


def _speedups_at(table: SpeedupTable) -> tuple[SpeedupAt, ...]:
    return tuple(
        SpeedupAt(p.draft_tokens, round(p.acceptance_length, 4), round(p.speedup, 4), _rounded(p.low), _rounded(p.high))
        for p in table.points
    )


def _load_at(choice: LoadChoice, table: SpeedupTable) -> LoadAt:
    figures = (round(choice.speedup, 4), round(choice.low, 4), round(choice.high, 4))
    return LoadAt(choice.concurrency, round(choice.weight, 6), choice.draft_tokens, *figures, _speedups_at(table))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


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
    points: Sequence[Any], budget: Budget, tokens: float, model: SpeedModel, source: dict[int, float], loads: Loads
) -> FastestPick | None:
    """The point and its k at each of ``loads`` of the highest predicted speed-up within the budget, as
    :func:`~eaglequant.search.schedule.ranked` ranks them (a tie within the model's error goes to fewer bytes: points
    come smallest first); None: no candidate is within the budget at any k."""
    priced = []  # (index, engine, tables a load)
    for index, point in enumerate(points):
        if point.prediction is None or point.candidate.round_cost is None:
            continue
        cost = point.candidate.round_cost
        allowed = allowed_acceptance(point.prediction, budget, tokens)
        if allowed:
            priced.append((index, cost.engine_release, model.tables(point.candidate.label, cost, allowed, loads)))
    if not priced:
        return None
    plans = [serving_plan(tables[0].draft, _by_load(tables), loads) for _, _, tables in priced]
    ranking = ranked(plans)
    index, engine, tables = priced[ranking.pick]
    source_tables = model.tables("source", model.source_cost, source, loads)
    tied = sorted({ranking.top, *ranking.tied} - {ranking.pick}) if ranking.tied else []
    return FastestPick(
        index, engine, tables, plans[ranking.pick], loads,
        None if ranking.runner_up is None else plans[ranking.runner_up],
        tuple(plans[i] for i in tied),
        plans[ranking.top] if ranking.tie_broken else None,
        serving_plan("source", _by_load(source_tables), loads),
        source_tables[0],
    )  # fmt: skip


def _by_load(tables: tuple[SpeedupTable, ...]) -> dict[int, SpeedupTable]:
    return {table.concurrency: table for table in tables}
