"""The search's candidate loop, shared by both objectives: the captured inputs checked, the candidates priced from
headers (or refused in one line when none loads), the source draft predicted once, and the candidates converted and
predicted from the smallest up (:func:`judged_from_smallest`), each a :class:`SearchPoint`. Which of them is written
is the objective's (:mod:`eaglequant.search.objectives`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError, given, placeholder, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.engines import get_engine
from eaglequant.layouts.head import HeadDescription
from eaglequant.record.search import SearchRow
from eaglequant.schemes.model import builtin_scheme_names, load_scheme
from eaglequant.search.budget import Budget
from eaglequant.search.candidates import Candidate, priced_candidates
from eaglequant.search.sequential import SequentialPlan


@dataclass(frozen=True)
class SearchPoint:
    """A candidate priced, and predicted where the search got to it."""

    candidate: Candidate
    bytes_per_round: int  # the largest over the targeted engines
    prediction: Any = None  # prediction.predict.Prediction; None: not run (a smaller point met the budget first)
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
            None if prediction is None else prediction.record().to_json(),
            self.within,
            None if table is None else table.sequences,
            None if table is None else sum(table.positions),
        )


def predictor_for(
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


def captured_sequences(head: HeadDescription, inputs: Path, budget: Budget) -> list[Any]:
    """The captured sequences, checked to be this draft's inputs and enough for the budget's rule."""
    from eaglequant.prediction.predict import load_captured

    sequences = load_captured(inputs, head=head)
    if budget.bound and len(sequences) < 2:
        raise InputError(
            words(given("inputs", str(inputs)), f": {len(sequences)} sequence; the drop's bound is over sequences"),
            hint=words("capture at least 2 prompts, or judge the estimate: ", suggested("rule", "point")),
        )
    return sequences


def priced_or_refused(
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


def _titled(engines: Sequence[str]) -> str:
    return ", ".join(get_engine(engine).titled for engine in engines)


def skipped_by_code(skipped: dict[Finding, int]) -> dict[str, int]:
    """How many candidates were skipped, by the code of why."""
    counts: dict[str, int] = {}
    for why, count in skipped.items():
        counts[why.code] = counts.get(why.code, 0) + count
    return counts


def _skipped_text(skipped: dict[Finding, int]) -> str:
    """How many candidates were skipped and why, largest first, in one line."""
    ranked = sorted(skipped.items(), key=lambda item: (-item[1], item[0].message))
    return "; ".join(f"{count} where {why}" for why, count in ranked) or "none skipped"


def first_line(engines: Sequence[str], priced: int, skipped: dict[Finding, int]) -> str:
    """What the search targets, prices and leaves out, said before it starts."""
    left_out = f"; skipped: {_skipped_text(skipped)}" if skipped else ""
    return f"searching for {_titled(engines)}: {priced} candidates priced from headers{left_out}"


def judged_from_smallest(
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


def chosen_vocab_sizes(head: HeadDescription, counts: str | Path | None, sizes: Sequence[int]) -> list[int | None]:
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
