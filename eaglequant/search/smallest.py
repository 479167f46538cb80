"""``search()``: the draft written for an acceptance budget, for either objective, and its result.

The candidates are whole-draft choices: each built-in scheme in each format every targeted engine loads it from,
with ``lm_head`` kept or quantized (where every targeted engine runs it quantized) in that scheme or, where the
format stores per-module kinds and the target's layer count is known, in another built-in scheme of its own, and the
draft vocabulary as it is or pruned to each given size (:mod:`eaglequant.vocabulary.pruned_head`). Each is priced from
headers alone (the weight bytes a speculative round reads, the largest over the targeted engines:
:mod:`eaglequant.readback.cost`), then they are tried from the smallest up: each is converted, and its greedy
acceptance replayed on captured inputs against the source draft's (as ``verify --inputs``):
:mod:`eaglequant.search.candidate_loop`. The bytes objective stops at the first within the budget, the smallest
draft that meets it; no candidate is chosen whose prediction has not run. The speed-up objective predicts them all
and writes the fastest at its k (:mod:`eaglequant.search.objectives`). Deterministic: ties in bytes go by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import check_destination
from eaglequant.checkpoint.files import write_json
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.draft_tokens import DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.findings import Finding
from eaglequant.conversion.options import DEFAULT_ENGINES
from eaglequant.engines import expanded_engines, get_engine
from eaglequant.layouts.detect import describe_head
from eaglequant.readback.cost import source_bytes_per_round
from eaglequant.record.search import SEARCH_RECORD, SearchBudget, SearchRecord
from eaglequant.search.budget import Budget
from eaglequant.search.candidate_loop import (
    SearchPoint,
    captured_sequences,
    chosen_vocab_sizes,
    first_line,
    judged_from_smallest,
    predictor_for,
    priced_or_refused,
    skipped_by_code,
)
from eaglequant.search.candidates import NEEDS_LAYER_COUNT
from eaglequant.search.fastest import FastestPick, SpeedModel, fastest
from eaglequant.search.objectives import chosen_point, gates, objective_and_loads, speed_model
from eaglequant.search.sequential import SequentialPlan


@dataclass
class SearchResult:
    """A search's frontier and its choice, with the live objects behind them; :meth:`record` is what is written."""

    source: Path
    destination: Path | None
    budget: Budget
    budget_tokens: float
    source_length: float
    source_bytes_per_round: int
    points: list[SearchPoint]
    chosen: SearchPoint | None
    seconds: float
    pruned_source: Path | None = None
    engines: tuple[str, ...] = field(default=())
    skipped: dict[Finding, int] = field(default_factory=dict)  # candidates not priced: why -> how many
    loaded_by: tuple[str, ...] = ()  # the engines whose readers load the written draft (explain --engine all)
    sequential: SequentialPlan | None = None  # None: every candidate predicted on every sequence
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS
    objective: str = "bytes"
    pick: FastestPick | None = None  # with the speedup objective: the chosen candidate's k and speed-up
    speed: SpeedModel | None = None

    @property
    def ok(self) -> bool:
        return self.chosen is not None

    @property
    def notes(self) -> list[Finding]:
        """What the search left out or left behind, in words."""
        found = []
        unnamed = sum(n for why, n in self.skipped.items() if why.code == NEEDS_LAYER_COUNT.code)
        if unnamed:
            found.append(
                Finding(
                    NEEDS_LAYER_COUNT.code,
                    "",
                    f"{unnamed} candidates were skipped for want of the target's layer count (--target-layers N): "
                    "their rules or per-module entries name modules after the target's layers",
                )
            )
        if self.pruned_source is not None:
            found.append(
                Finding(
                    "pruned-source-kept",
                    str(self.pruned_source),
                    f"the pruned BF16 source {self.pruned_source} was left beside the chosen draft: it is the "
                    "source the draft's report records (verify and upload compare against it), so keep it with the "
                    "draft",
                )
            )
        return found

    @property
    def stopped(self) -> str:
        """Why the search stopped where it did, in words."""
        tried = sum(point.prediction is not None for point in self.points)
        if self.objective == "speedup":
            if self.pick is None:
                return f"no candidate is within the budget at any k: all {tried} predicted"
            return f"{self.pick.text()}; all {tried} predicted"
        if self.chosen is None:
            return f"no candidate is within the budget: all {tried} predicted{self._inconclusive_text()}"
        return (
            f"the smallest within the budget: {tried} predicted from the smallest up; the {len(self.points) - tried} "
            f"larger need no prediction{self._inconclusive_text()}"
        )

    def _inconclusive_text(self) -> str:
        """The candidates whose interval straddled the budget, not picked since not proven within it ('' if none)."""
        unsettled = [
            p.candidate.label
            for p in self.points
            if p.prediction is not None and not p.within and self.budget.inconclusive(p.prediction, self.budget_tokens)
        ]
        if not unsettled:
            return ""
        return (
            f"; inconclusive, so not picked: {', '.join(unsettled)} (the interval straddles the budget: not proven "
            "within it; more captured sequences would tell)"
        )

    def record(self) -> SearchRecord:
        """What ``eaglequant_search.json`` and ``search --json`` hold."""
        budget = self.budget
        return SearchRecord(
            str(self.source),
            None if self.destination is None else str(self.destination),
            None if self.pruned_source is None else str(self.pruned_source),
            self.engines,
            self.loaded_by,
            skipped_by_code(self.skipped),
            tuple(self.notes),
            SearchBudget(
                budget.value,
                budget.relative,
                "bound" if budget.bound else "point",
                self.budget_tokens,
                budget.text(self.budget_tokens),
            ),
            self.source_length,
            self.source_bytes_per_round,
            None if self.chosen is None else self.chosen.row(),
            self.stopped,
            round(self.seconds, 1),
            tuple(point.row() for point in self.points),
            None if self.sequential is None else self.sequential.record(),
            self.max_draft_tokens,
            self.objective,
            None if self.pick is None or self.speed is None else self.pick.record(self.speed),
        )

    @property
    def positions_predicted(self) -> int:
        """The captured draft positions run through the chain for the candidates' verdicts, all together."""
        return sum(row.positions_predicted or 0 for row in (point.row() for point in self.points))


def search(
    src: str | Path,
    dst: str | Path,
    *,
    inputs: str | Path,
    max_acceptance_drop: str | float,
    rule: str = "bound",
    counts: str | Path | None = None,
    vocab_sizes: Sequence[int] = (),
    schemes: Sequence[str] = (),
    engines: Sequence[str] = DEFAULT_ENGINES,
    target_layers: int | None = None,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
    device: str = "cpu",
    sequential: bool = True,
    objective: str = "bytes",
    target: str | Path | None = None,
    tensor_parallel_size: int = 1,
    measured: str | Path | None = None,
    concurrency: str | int | Sequence[int] | Mapping[int, float] | None = None,
) -> SearchResult:
    """Write into ``dst`` the smallest draft (weight bytes a round reads) whose predicted greedy acceptance on the
    captured ``inputs`` loses at most ``max_acceptance_drop`` against ``src``'s: tokens (``0.05``) or a share of
    the source's accepted tokens (``"5%"``); ``rule``: "bound" judges the 95% upper bound of the drop (many
    candidates are tried, and the luckiest estimate would win), "point" its estimate, as ``verify``'s gate does.
    ``counts`` (captured inputs or a token-count file) lets the search
    prune the vocabulary, to each of ``vocab_sizes`` (default: a half, a quarter and an eighth of the draft's).
    ``schemes``: the built-in schemes to try (default: all). A pruned choice writes its BF16 head beside ``dst``
    (``DST-vocabN-bf16``), the source of the conversion in ``dst``. ``progress``: told, in words, how far it is.
    Each prediction tabulates every k from 1 to ``max_draft_tokens`` (judged at k = 3) on ``device``;
    ``sequential`` (with the bound rule) stops a candidate at the first planned look that settles its verdict
    (:mod:`eaglequant.search.sequential`). ``objective``: "bytes" (the smallest within the budget) or "speedup"
    (every candidate predicted, and the candidate and k of the highest predicted speed-up over ``target``, a
    checkpoint directory or its config.json, by default the one the capture in ``inputs`` records where it is a
    local directory, on ``tensor_parallel_size`` ranks, within the budget at that k:
    :mod:`eaglequant.search.fastest`; ``measured``, an ``accept`` record, calibrates the model; ``concurrency``: the
    loads, each given its k, ``"1,2,4"``, ``"1-64"`` or ``"4:0.5,16:0.5"``: :mod:`eaglequant.search.schedule`); where
    no k beats the target alone at any load, nothing is written (``ok`` False)."""
    from eaglequant.prediction.predict import PredictionSettings
    from eaglequant.search.outputs import SearchOutputs
    from eaglequant.search.predictions import single_threaded_torch

    started = time.monotonic()
    budget = Budget.parse(max_acceptance_drop, rule)
    target, loads = objective_and_loads(objective, target, Path(inputs), measured, concurrency, tensor_parallel_size)
    PredictionSettings(max_draft_tokens, device)  # checked before any work
    engines = tuple(dict.fromkeys(get_engine(name).key for name in expanded_engines(engines)))
    source, destination, told = Path(src), Path(dst), progress or (lambda text: None)
    check_destination(source, destination, overwrite)
    with (
        Checkpoint.open(source) as checkpoint,
        single_threaded_torch(),
        SearchOutputs(source, destination, counts) as outputs,
    ):
        head = describe_head(checkpoint)
        sequences = captured_sequences(head, Path(inputs), budget)
        sizes = chosen_vocab_sizes(head, counts, vocab_sizes)
        speed = speed_model(head, engines, target, (tensor_parallel_size, measured), loads, Path(inputs))
        priced, skipped = priced_or_refused(head, schemes, engines, sizes, target_layers)
        told(first_line(engines, len(priced), skipped))
        told(f"predicting the source draft on {len(sequences)} sequences")
        predictor, tokens, plan = predictor_for(checkpoint, sequences, budget, (max_draft_tokens, device, sequential))
        predictor.stop_within = speed is None  # the speedup objective's pick takes its k from a whole table
        source_length = predictor.source.length().value
        within, kept, judged = gates(budget, tokens, speed is None)
        points = judged_from_smallest(priced, outputs, predictor, (within, kept), told, started, judged, speed is None)
        pick = None if speed is None else fastest(points, budget, tokens, speed, predictor.table.lengths(), loads)
        chosen = chosen_point(points, pick, speed is None)
        result = SearchResult(
            source, None, budget, tokens, source_length, source_bytes_per_round(head), points, chosen,
            time.monotonic() - started, None, engines, skipped, sequential=plan, max_draft_tokens=max_draft_tokens,
            objective=objective, pick=pick, speed=speed,
        )  # fmt: skip
        if chosen is not None:
            _commit_choice(result, outputs, points.index(chosen), target_layers, overwrite)
    result.seconds = time.monotonic() - started
    return result


def _commit_choice(result: SearchResult, outputs: Any, index: int, target_layers: int | None, overwrite: bool) -> None:
    """The chosen candidate's stage, with the search record and the card's section on it, made DST."""
    from eaglequant.publish.card import refresh_card

    stage = outputs.stages[index].path
    assert result.chosen is not None
    vocab = result.chosen.candidate.vocab
    result.destination = outputs.destination
    result.pruned_source = outputs.pruned_for(vocab)
    result.loaded_by = _loaded_by(stage, target_layers)
    write_json(stage / SEARCH_RECORD, result.record().to_json())
    refresh_card(stage)
    outputs.commit(index, vocab, overwrite)


def _loaded_by(written: Path, target_layers: int | None) -> tuple[str, ...]:
    """The engines (with their releases) whose readers load ``written`` as it is, as ``explain --engine all``."""
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
    from eaglequant.record.as_recorded import explain_written

    readings = explain_written(written, ["all"], target_layers, None, DEFAULT_DRAFT_TOKENS).engines
    return tuple(reading.titled for reading in readings if reading.loads and not reading.all_problems)
