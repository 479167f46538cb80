"""``search()``: the smallest draft within an acceptance budget.

The candidates are whole-draft choices: each built-in scheme in each format every targeted engine loads it from,
with ``lm_head`` kept or quantized (where every targeted engine runs it quantized) in that scheme or, where the
format stores per-module kinds and the target's layer count is known, in another built-in scheme of its own, and the
draft vocabulary as it is or pruned to each given size (:mod:`eaglequant.vocabulary.pruned_head`). Each is priced from
headers alone (the weight bytes a speculative round reads, the largest over the targeted engines:
:mod:`eaglequant.readback.cost`), then they are tried from the smallest up: each is converted, and its greedy
acceptance replayed on captured inputs against the source draft's (as ``verify --inputs``). The first within the
budget is the smallest draft that meets it, so the search stops there; no candidate is chosen whose prediction has
not run. Deterministic: ties in bytes go by name.
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
from eaglequant.common.errors import InputError, given, placeholder, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.conversion.options import DEFAULT_ENGINES
from eaglequant.engines import expanded_engines, get_engine
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription
from eaglequant.readback.cost import round_cost, source_bytes_per_round
from eaglequant.record.search import SEARCH_RECORD, SearchBudget, SearchRecord, SearchRow
from eaglequant.schemes.model import builtin_scheme_names, load_scheme
from eaglequant.search.budget import Budget
from eaglequant.search.candidates import NEEDS_LAYER_COUNT, Candidate, priced_candidates
from eaglequant.search.fastest import FastestPick, SpeedModel, allowed_acceptance, fastest, objective_target
from eaglequant.search.schedule import Loads, parse_loads
from eaglequant.search.sequential import SequentialPlan
from eaglequant.speedup.draft_fit import check_draft_fits


@dataclass(frozen=True)
class SearchPoint:
    """A candidate priced, and predicted where the search got to it."""

    candidate: Candidate
    bytes_per_round: int  # the largest over the targeted engines
    prediction: Any = None  # acceptance.predict.Prediction; None: not run (a smaller point met the budget first)
    within: bool | None = None

    def row(self) -> SearchRow:
        """The point as the search record holds it."""
        candidate, prediction = self.candidate, self.prediction
        table = None if prediction is None else prediction.quantized_table
        return SearchRow(
            candidate.label,
            candidate.scheme,
            candidate.format,
            candidate.lm_head,
            candidate.lm_head_scheme or (candidate.scheme if candidate.lm_head else None),
            candidate.vocab,
            self.bytes_per_round,
            None if prediction is None else prediction.to_json(),
            self.within,
            None if table is None else table.sequences,
            None if table is None else sum(table.positions),
        )


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
            _by_code(self.skipped),
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
    target, loads = _objective(objective, target, Path(inputs), measured, concurrency, tensor_parallel_size)
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
        sequences = _captured(head, Path(inputs), budget)
        sizes = _vocab_sizes(head, counts, vocab_sizes)
        speed = _speed_model(head, engines, target, (tensor_parallel_size, measured), loads)
        priced, skipped = _priced(head, schemes, engines, sizes, target_layers)
        told(_first_line(engines, len(priced), skipped))
        told(f"predicting the source draft on {len(sequences)} sequences")
        predictor, tokens, plan = _predictor(checkpoint, sequences, budget, (max_draft_tokens, device, sequential))
        predictor.stop_within = speed is None  # the speedup objective's pick takes its k from a whole table
        source_length = predictor.source.length().value
        within, kept, judged = _gates(budget, tokens, speed is None)
        points = _judged_from_smallest(priced, outputs, predictor, (within, kept), told, started, judged, speed is None)
        pick = None if speed is None else fastest(points, budget, tokens, speed, predictor.table.lengths(), loads)
        chosen = _chosen(points, pick, speed is None)
        result = SearchResult(
            source, None, budget, tokens, source_length, source_bytes_per_round(head), points, chosen,
            time.monotonic() - started, None, engines, skipped, sequential=plan, max_draft_tokens=max_draft_tokens,
            objective=objective, pick=pick, speed=speed,
        )  # fmt: skip
        if chosen is not None:
            _commit_choice(result, outputs, points.index(chosen), target_layers, overwrite)
    result.seconds = time.monotonic() - started
    return result


def _objective(
    objective: str, target: str | Path | None, inputs: Path, measured: Any, concurrency: Any, tensor_parallel_size: int
) -> tuple[str | Path | None, Loads]:
    """The target the objective prices and the loads it is judged at; an option of the speedup objective given to
    another is refused."""
    speed_options = {"measured": measured, "concurrency": concurrency}
    parallel = {"tensor_parallel_size": None if tensor_parallel_size == 1 else tensor_parallel_size}
    return objective_target(objective, target, inputs, **speed_options, **parallel), parse_loads(concurrency)


def _gates(
    budget: Budget, tokens: float, smallest: bool
) -> tuple[Callable[[Any], bool], Callable[[Any], bool], Callable[[Any], str]]:
    """Whether a prediction is within the budget (at k = 3), whether its candidate can still be chosen (the speedup
    objective: within the budget at some k), and its verdict in words."""
    within: Callable[[Any], bool] = lambda p: budget.within(p, tokens)  # noqa: E731
    kept: Callable[[Any], bool] = within if smallest else (lambda p: bool(allowed_acceptance(p, budget, tokens)))
    return within, kept, (lambda p: budget.judged_text(p, tokens))


def _chosen(points: list[SearchPoint], pick: FastestPick | None, smallest: bool) -> SearchPoint | None:
    """The point written: the smallest within the budget, or the speed-up objective's pick where it pays."""
    if smallest:
        return next((p for p in points if p.within), None)
    return None if pick is None or not pick.plan.pays else points[pick.index]


def _predictor(
    checkpoint: Checkpoint, sequences: list[Any], budget: Budget, settings: tuple[int, str, bool]
) -> tuple[Any, float, SequentialPlan | None]:
    """The source draft predicted once (``settings``: the longest k tabulated, the device, sequential or not), the
    budget in tokens against it, and the looks each candidate gets (sequential, where the bound judges)."""
    from eaglequant.search.predictions import CandidatePredictor

    max_draft_tokens, device, sequential = settings
    predictor = CandidatePredictor(checkpoint, sequences, max_draft_tokens, device)
    tokens = budget.tokens(predictor.source.length().value)
    plan = SequentialPlan.of(len(sequences)) if sequential and budget.bound else None
    predictor.sequential = None if plan is None else (plan, tokens)
    return predictor, tokens, plan


def _captured(head: HeadDescription, inputs: Path, budget: Budget) -> list[Any]:
    """The captured sequences, checked to be this draft's inputs and enough for the budget's rule."""
    from eaglequant.prediction.predict import load_captured

    sequences = load_captured(inputs, head=head)
    if budget.bound and len(sequences) < 2:
        raise InputError(
            words(given("inputs", str(inputs)), f": {len(sequences)} sequence; the drop's bound is over sequences"),
            hint=words("capture at least 2 prompts, or judge the estimate: ", suggested("rule", "point")),
        )
    return sequences


def _priced(
    head: HeadDescription,
    schemes: Sequence[str],
    engines: tuple[str, ...],
    sizes: list[int | None],
    target_layers: int | None,
) -> tuple[list[tuple[Candidate, int]], dict[Finding, int]]:
    """The candidates every targeted engine loads, priced, smallest first, and the others counted by why; none
    priced is one line that says why."""
    loaded = {name: load_scheme(name) for name in list(schemes) or builtin_scheme_names()}
    priced, skipped = priced_candidates(head, loaded, list(engines), sizes, target_layers)
    if not priced:
        raise InputError(
            f"no candidate loads in every targeted engine ({_titled(engines)}): {_skipped_text(skipped)}",
            hint="target fewer engines",
        )
    return priced, skipped


def _speed_model(
    head: HeadDescription,
    engines: tuple[str, ...],
    target: str | Path | None,
    parallel_measured: tuple[int, Any],
    loads: Loads,
) -> SpeedModel | None:
    """The cost model the speedup objective prices candidates with (None: no target, the bytes objective):
    ``target``'s forwards on as many ranks as ``parallel_measured`` says, the source draft's round in the first
    targeted engine (an unquantized round reads the same in each), the terms stated or fitted to its measured
    record. It prices a round at each of ``loads`` now, so that a load it cannot predict at is refused before any
    candidate is converted."""
    if target is None:
        return None
    check_draft_fits(head.config, Path(target))
    engine = get_engine(engines[0])
    source = round_cost(head, engine.key, engine.release, {})
    model = SpeedModel.of(target, *parallel_measured, source)
    model.tables("source", source, {1: 1.0}, loads)
    return model


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


def _titled(engines: Sequence[str]) -> str:
    return ", ".join(get_engine(engine).titled for engine in engines)


def _by_code(skipped: dict[Finding, int]) -> dict[str, int]:
    """How many candidates were skipped, by the code of why."""
    counts: dict[str, int] = {}
    for why, count in skipped.items():
        counts[why.code] = counts.get(why.code, 0) + count
    return counts


def _skipped_text(skipped: dict[Finding, int]) -> str:
    """How many candidates were skipped and why, largest first, in one line."""
    ranked = sorted(skipped.items(), key=lambda item: (-item[1], item[0].message))
    return "; ".join(f"{count} where {why}" for why, count in ranked) or "none skipped"


def _first_line(engines: Sequence[str], priced: int, skipped: dict[Finding, int]) -> str:
    """What the search targets, prices and leaves out, said before it starts."""
    left_out = f"; skipped: {_skipped_text(skipped)}" if skipped else ""
    return f"searching for {_titled(engines)}: {priced} candidates priced from headers{left_out}"


def _loaded_by(written: Path, target_layers: int | None) -> tuple[str, ...]:
    """The engines (with their releases) whose readers load ``written`` as it is, as ``explain --engine all``."""
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
    from eaglequant.record.as_recorded import explain_written

    readings = explain_written(written, ["all"], target_layers, None, DEFAULT_DRAFT_TOKENS).engines
    return tuple(reading.titled for reading in readings if reading.loads and not reading.all_problems)


def _judged_from_smallest(
    priced: list[tuple[Candidate, int]],
    outputs: Any,
    predictor: Any,
    within_kept: tuple[Callable[[Any], bool], Callable[[Any], bool]],
    told: Callable[[str], None],
    started: float,
    judged: Callable[[Any], str] = lambda prediction: prediction.difference.text(signed=True),
    stop_at_within: bool = True,
) -> list[SearchPoint]:
    """Every candidate, the smallest predicted first until one is within the budget (``within_kept[0]``; all of them
    without ``stop_at_within``); the rest priced only. Each is converted into a stage of DST (``outputs``:
    :class:`~eaglequant.search.outputs.SearchOutputs`), removed once it cannot be chosen (``within_kept[1]`` False:
    with the speedup objective, within the budget at no k)."""
    from eaglequant.search.predictions import predicted_from_smallest, prediction_workers

    within, kept = within_kept

    best: list[tuple[float, str]] = []  # the smallest drop predicted so far, and whose

    def converted(index: int) -> Path:
        return outputs.converted(index, priced[index][0])

    def done(index: int, prediction: Any) -> None:
        label = priced[index][0].label
        best[:] = [min([*best, (prediction.drop, label)])]
        told(
            f"predicted {index + 1} of at most {len(priced)}: {label} on {prediction.sequences} sequences "
            f"{judged(prediction)}; best so far: {best[0][1]} "
            f"({-best[0][0]:+.3f}); {time.monotonic() - started:.0f} s"
        )
        if not kept(prediction):
            outputs.discard(index)

    def stop(prediction: Any) -> bool:
        return stop_at_within and within(prediction)

    predictions = predicted_from_smallest(len(priced), converted, predictor.predicted, stop, done, prediction_workers())
    points = [
        SearchPoint(candidate, nbytes, prediction, within(prediction))
        for (candidate, nbytes), prediction in zip(priced, predictions, strict=False)
    ]
    return points + [SearchPoint(candidate, nbytes) for candidate, nbytes in priced[len(points) :]]


def _vocab_sizes(head: HeadDescription, counts: str | Path | None, sizes: Sequence[int]) -> list[int | None]:
    lm_head = head.find_linear("lm_head")
    rows = None if lm_head is None else lm_head.out_features
    if counts is None:
        if sizes:
            raise InputError(
                words(given("vocab_sizes", sizes[0]), " prunes the vocabulary by token counts: give ",
                      placeholder("counts", "FILE")),
                hint="the counts of a capture (eaglequant capture) or a token-count file",
            )  # fmt: skip
        return [None]
    if rows is None:
        raise InputError("the draft has no lm_head of its own, so there is no vocabulary to prune")
    from eaglequant.vocabulary.counts import check_counts_for

    check_counts_for(head, Path(counts))  # before any candidate is priced: captured from this draft's target
    chosen = list(sizes) or [rows // 2, rows // 4, rows // 8]
    bad = [size for size in chosen if type(size) is not int or not 1 <= size < rows]
    if bad:
        raise InputError(
            words(given("vocab_sizes", bad[0]), f": the draft's vocabulary has {rows} tokens"),
            hint=words("sizes from 1 to ", suggested("vocab_sizes", rows - 1)),
        )
    return [None, *sorted(set(chosen), reverse=True)]
