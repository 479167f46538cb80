"""``search()``: the smallest draft within an acceptance budget.

The candidates are whole-draft choices: each built-in scheme in each format every targeted engine loads it from,
with ``lm_head`` kept or quantized (where every targeted engine runs it quantized) in that scheme or, where the
format stores per-module kinds and the target's layer count is known, in another built-in scheme of its own, and the
draft vocabulary as it is or pruned to each given size (:mod:`eaglequant.vocabulary.prune`). Each is priced from
headers alone (the weight bytes a speculative round reads, the largest over the targeted engines:
:mod:`eaglequant.readback.cost`), then they are tried from the smallest up: each is converted, and its greedy
acceptance replayed on captured inputs against the source draft's (as ``verify --inputs``). The first within the
budget is the smallest draft that meets it, so the search stops there; no candidate is chosen whose prediction has
not run. Deterministic: ties in bytes go by name.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

from eaglequant.api.budget import Budget
from eaglequant.checkpoint.destination import check_destination
from eaglequant.checkpoint.files import write_json
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import EagleQuantError, InputError, given, suggested, words
from eaglequant.conversion.options import DEFAULT_ENGINES, ConversionOptions
from eaglequant.conversion.plan import build_plan
from eaglequant.conversion.request import ConversionRequest
from eaglequant.engines import ALL_ENGINES, get_engine
from eaglequant.formats import FORMATS
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription
from eaglequant.readback.cost import source_bytes_per_round
from eaglequant.record.search import SEARCH_RECORD
from eaglequant.schemes.assignment import SchemeAssignment, SchemeRule
from eaglequant.schemes.model import builtin_scheme_names, load_scheme


@dataclass(frozen=True)
class Candidate:
    scheme: str
    format: str
    lm_head: bool  # quantized too
    vocab: int | None  # the pruned draft vocabulary; None: as the source has it
    lm_head_scheme: str | None = None  # lm_head's own scheme (ModelOpt MIXED_PRECISION); None: the decoder's

    @property
    def label(self) -> str:
        own = f" {self.lm_head_scheme}" if self.lm_head_scheme else ""
        return (
            f"{self.scheme} / {self.format}"
            + (f" + lm_head{own}" if self.lm_head else "")
            + ("" if self.vocab is None else f", vocab {self.vocab}")
        )

    def settings(self) -> dict[str, Any]:
        """How ``convert`` writes it (the vocabulary aside)."""
        if self.lm_head_scheme:
            return {"scheme_for": [f"lm_head={self.lm_head_scheme}"]}
        return {"quantize": ["lm_head"] if self.lm_head else []}


@dataclass(frozen=True)
class SearchPoint:
    candidate: Candidate
    bytes_per_round: int  # the largest over the targeted engines
    prediction: Any = None  # acceptance.predict.Prediction; None: not run (a smaller point met the budget first)
    within: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.label,
            "scheme": self.candidate.scheme,
            "format": self.candidate.format,
            "lm_head_quantized": self.candidate.lm_head,
            "lm_head_scheme": self.candidate.lm_head_scheme
            or (self.candidate.scheme if self.candidate.lm_head else None),
            "draft_vocab_size": self.candidate.vocab,
            "bytes_per_round": self.bytes_per_round,
            "predicted": None if self.prediction is None else self.prediction.to_json(),
            "within_budget": self.within,
        }


@dataclass
class SearchResult:
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
    skipped_own_schemes: int = 0  # lm_head-in-a-scheme-of-its-own candidates not priced: no target layer count
    loaded_by: tuple[str, ...] = ()  # the engines whose readers load the written draft (explain --engine all)

    @property
    def ok(self) -> bool:
        return self.chosen is not None

    @property
    def notes(self) -> list[str]:
        """What the search left out or left behind, in words."""
        found = []
        if self.skipped_own_schemes:
            found.append(
                f"{self.skipped_own_schemes} candidates with lm_head in a scheme of its own were skipped: their "
                "per-module entries name modules after the target's layers, so they need the target's layer count "
                "(--target-layers N), which was not given"
            )
        if self.pruned_source is not None:
            found.append(
                f"the pruned BF16 head {self.pruned_source} stays beside the chosen draft: it is the source the "
                "draft's report records (verify and upload compare against it), so keep it with the draft"
            )
        return found

    @property
    def stopped(self) -> str:
        """Why the search stopped where it did, in words."""
        tried = sum(point.prediction is not None for point in self.points)
        if self.chosen is None:
            return f"no candidate is within the budget: all {tried} predicted"
        return (
            f"the smallest within the budget: {tried} predicted from the smallest up; the {len(self.points) - tried} "
            "larger need no prediction"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "destination": None if self.destination is None else str(self.destination),
            "pruned_source": None if self.pruned_source is None else str(self.pruned_source),
            "engines": list(self.engines),
            "loaded_by": list(self.loaded_by),
            "skipped_own_schemes": self.skipped_own_schemes,
            "notes": self.notes,
            "budget": {
                "value": self.budget.value,
                "relative": self.budget.relative,
                "rule": "bound" if self.budget.bound else "point",
                "tokens": self.budget_tokens,
                "text": self.budget.text(self.budget_tokens),
            },
            "source_acceptance_length": self.source_length,
            "source_bytes_per_round": self.source_bytes_per_round,
            "chosen": None if self.chosen is None else self.chosen.to_json(),
            "stopped": self.stopped,
            "seconds": round(self.seconds, 1),
            "frontier": [point.to_json() for point in self.points],
        }


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
) -> SearchResult:
    """Write into ``dst`` the smallest draft (weight bytes a round reads) whose predicted greedy acceptance on the
    captured ``inputs`` loses at most ``max_acceptance_drop`` against ``src``'s: tokens (``0.05``) or a share of
    the source's accepted tokens (``"5%"``); ``rule``: "bound" judges the 95% upper bound of the drop (many
    candidates are tried, and the luckiest estimate would win), "point" its estimate, as ``verify``'s gate does.
    ``counts`` (captured inputs or a token-count file) lets the search
    prune the vocabulary, to each of ``vocab_sizes`` (default: a half, a quarter and an eighth of the draft's).
    ``schemes``: the built-in schemes to try (default: all). A pruned choice writes its BF16 head beside ``dst``
    (``DST-vocabN-bf16``), the source of the conversion in ``dst``. ``progress``: told, in words, how far it is."""
    from eaglequant.acceptance.predict import load_captured
    from eaglequant.api.search_predictions import CandidatePredictor, single_threaded_torch

    started = time.monotonic()
    budget = Budget.parse(max_acceptance_drop, rule)
    for engine in engines:  # a misspelt engine is named, not read as one that loads no scheme
        if engine != ALL_ENGINES:
            get_engine(engine)
    source, destination = Path(src), Path(dst)
    check_destination(source, destination, overwrite)
    destination.parent.mkdir(parents=True, exist_ok=True)
    told = progress or (lambda text: None)
    with Checkpoint.open(source) as checkpoint, single_threaded_torch():
        head = describe_head(checkpoint)
        sequences = load_captured(Path(inputs), head=head)
        if budget.bound and len(sequences) < 2:
            raise InputError(
                words(given("inputs", str(inputs)), f": {len(sequences)} sequence; the drop's bound is over sequences"),
                hint=words("capture at least 2 prompts, or judge the estimate: ", suggested("rule", "point")),
            )
        sizes = _vocab_sizes(head, counts, vocab_sizes)
        names = list(schemes) or builtin_scheme_names()
        priced, skipped = _priced(head, names, list(engines), sizes, target_layers)
        if not priced:
            raise InputError("no built-in scheme loads in the targeted engines", hint="target fewer engines")
        told(_first_line(engines, len(priced), skipped))
        told(f"predicting the source draft on {len(sequences)} sequences")
        predictor = CandidatePredictor(checkpoint, sequences)
        source_length = predictor.source.length().value
        tokens = budget.tokens(source_length)
        with tempfile.TemporaryDirectory(prefix="eaglequant-search-", dir=destination.parent.resolve()) as tmp:
            points = _judged_from_smallest(
                priced, Path(tmp), predictor, lambda prediction: budget.drop(prediction) <= tokens,
                (source, counts, engines, target_layers), told, started,
            )  # fmt: skip
    chosen = next((point for point in points if point.within), None)
    written, pruned = None, None
    if chosen is not None:
        written, pruned = _write_choice(
            source, chosen.candidate, destination, counts, engines, target_layers, overwrite
        )
    source_bytes = source_bytes_per_round(head)
    result = SearchResult(
        source, written, budget, tokens, source_length, source_bytes, points, chosen, time.monotonic() - started,
        pruned, tuple(engines), skipped, () if written is None else _loaded_by(written, target_layers),
    )  # fmt: skip
    if written is not None:
        from eaglequant.publish.card import refresh_card

        write_json(written / SEARCH_RECORD, result.to_json())
        refresh_card(written)
    return result


def _first_line(engines: Sequence[str], priced: int, skipped: int) -> str:
    """What the search targets, prices and leaves out, said before it starts."""
    titled = ", ".join(engine if engine == ALL_ENGINES else get_engine(engine).titled for engine in engines)
    left_out = f"; {skipped} with lm_head in a scheme of its own skipped: they need --target-layers" if skipped else ""
    return f"searching for {titled}: {priced} candidates priced from headers{left_out}"


def _loaded_by(written: Path, target_layers: int | None) -> tuple[str, ...]:
    """The engines (with their releases) whose readers load ``written`` as it is, as ``explain --engine all``."""
    from eaglequant.api import explain

    readings = explain(written, engines=["all"], target_layers=target_layers).engines
    return tuple(reading.titled for reading in readings if reading.loads and not reading.all_problems)


def _judged_from_smallest(
    priced: list[tuple[Candidate, int]],
    tmp: Path,
    predictor: Any,
    within: Callable[[Any], bool],
    conversion: tuple[Path, str | Path | None, Sequence[str], int | None],
    told: Callable[[str], None],
    started: float,
) -> list[SearchPoint]:
    """Every candidate, the smallest predicted first until one is within the budget; the rest priced only. Each
    pruned vocabulary is written once, for every candidate of that size."""
    from eaglequant.api.search_predictions import predicted_from_smallest, prediction_workers

    pruned: dict[int, Path] = {}
    best: list[tuple[float, str]] = []  # the smallest drop predicted so far, and whose

    def converted(index: int) -> Path:
        candidate, size = priced[index][0], priced[index][0].vocab
        if size is not None and size not in pruned:
            pruned[size] = _pruned(conversion[0], tmp / f"vocab-{size}", size, conversion[1])
        converted_from = conversion[0] if size is None else pruned[size]
        return _materialise(converted_from, tmp / f"candidate-{index}", candidate, *conversion[2:])

    def done(index: int, prediction: Any) -> None:
        label = priced[index][0].label
        best[:] = [min([*best, (prediction.drop, label)])]
        told(
            f"predicted {index + 1} of at most {len(priced)}: {label} {prediction.difference.value:+.3f} "
            f"({'within' if within(prediction) else 'over'} the budget); best so far: {best[0][1]} "
            f"({-best[0][0]:+.3f}); {time.monotonic() - started:.0f} s"
        )

    predictions = predicted_from_smallest(
        len(priced), converted, predictor.predicted, within, done, prediction_workers()
    )
    points = [
        SearchPoint(candidate, nbytes, prediction, within(prediction))
        for (candidate, nbytes), prediction in zip(priced, predictions, strict=False)
    ]
    return points + [SearchPoint(candidate, nbytes) for candidate, nbytes in priced[len(points) :]]


def _pruned(source: Path, out: Path, size: int, counts: str | Path | None) -> Path:
    """``source``'s vocabulary pruned to ``size`` tokens by ``counts``, in ``out``."""
    from eaglequant.api.pruning import prune

    assert counts is not None
    return prune(source, out, size=size, counts=counts, overwrite=True).destination


def _vocab_sizes(head: HeadDescription, counts: str | Path | None, sizes: Sequence[int]) -> list[int | None]:
    lm_head = head.find_linear("lm_head")
    rows = None if lm_head is None else lm_head.out_features
    if counts is None:
        if sizes:
            raise InputError(words("vocab_sizes need ", given("counts", None)), hint="give token counts to prune by")
        return [None]
    if rows is None:
        raise InputError("the draft has no lm_head of its own, so there is no vocabulary to prune")
    chosen = list(sizes) or [rows // 2, rows // 4, rows // 8]
    bad = [size for size in chosen if type(size) is not int or not 1 <= size < rows]
    if bad:
        raise InputError(
            words(given("vocab_sizes", list(sizes)), f": the draft's vocabulary has {rows} tokens"),
            hint=words("sizes from 1 to ", suggested("vocab_sizes", rows - 1)),
        )
    return [None, *sorted(set(chosen), reverse=True)]


def _priced(
    head: HeadDescription, schemes: list[str], engines: list[str], sizes: list[int | None], target_layers: int | None
) -> tuple[list[tuple[Candidate, int]], int]:
    """Every candidate the targeted engines load, with the bytes a round reads (largest over the engines), smallest
    first (ties by name); and how many with lm_head in a scheme of its own were skipped for want of the target's
    layer count."""
    from eaglequant.conversion.plan import ModuleSchemesNeedLayerCount
    from eaglequant.vocabulary.prune import pruned_description

    described = {size: head if size is None else pruned_description(head, size) for size in sizes}
    loaded = {name: load_scheme(name) for name in schemes}
    targeted = ConversionRequest.of(ConversionOptions(engines=tuple(engines), target_layers=target_layers), head.config)
    priced, skipped = [], 0
    for name, fmt, size in product(loaded, FORMATS.values(), sizes):
        if not fmt.supports(loaded[name]):
            continue
        own_schemes = [other for other in loaded if other != name and fmt.stores_mixed and fmt.supports(loaded[other])]
        options = [Candidate(name, fmt.name, False, size), Candidate(name, fmt.name, True, size)]
        options += [Candidate(name, fmt.name, True, size, other) for other in own_schemes]
        for candidate in options:
            own = (SchemeRule("lm_head", loaded[candidate.lm_head_scheme]),) if candidate.lm_head_scheme else ()
            quantize = tuple(candidate.settings().get("quantize", []))
            request = replace(targeted, assignment=SchemeAssignment(loaded[name], own), format=fmt, quantize=quantize)
            try:
                plan = build_plan(described[size], request)
            except ModuleSchemesNeedLayerCount:
                skipped += 1
                continue
            except EagleQuantError:
                continue  # an engine cannot load it, or runs lm_head unquantized there
            nbytes = max(cost.bytes_per_round for cost in plan.round_costs())
            priced.append((candidate, nbytes))
    return sorted(priced, key=lambda pair: (pair[1], pair[0].label)), skipped


def _materialise(
    converted_from: Path, out: Path, candidate: Candidate, engines: Sequence[str], target_layers: int | None
) -> Path:
    """``candidate`` converted from ``converted_from`` (the source, or its vocabulary already pruned) into ``out``,
    with one worker (the predictions have the other cores)."""
    from eaglequant.api import convert

    convert(
        converted_from, out, scheme=candidate.scheme, format=candidate.format, **candidate.settings(),
        engines=list(engines), target_layers=target_layers, overwrite=True, workers=1,
    )  # fmt: skip
    return out


def _write_choice(
    source: Path,
    candidate: Candidate,
    destination: Path,
    counts: str | Path | None,
    engines: Sequence[str],
    target_layers: int | None,
    overwrite: bool,
) -> tuple[Path, Path | None]:
    """The chosen candidate converted into ``destination``; returns it and the pruned BF16 head beside it (if any)."""
    check_destination(source, destination, overwrite)
    pruned_at = None
    converted_from = source
    if candidate.vocab is not None:
        pruned_at = destination.with_name(f"{destination.name}-vocab{candidate.vocab}-bf16")
        converted_from = _pruned(source, pruned_at, candidate.vocab, counts)
    _materialise(converted_from, destination, candidate, engines, target_layers)
    return destination, pruned_at
