"""``search`` does not pick a candidate whose predicted change straddles the budget: it is not proven within it. Its
verdict says inconclusive, with the sequences more that would settle it, and the search's stopping line names it."""

from __future__ import annotations

from pathlib import Path

from eaglequant.measurement.statistics import Acceptance, PromptCounts, paired_difference
from eaglequant.prediction.predict import Prediction
from eaglequant.search.budget import Budget
from eaglequant.search.candidates import Candidate
from eaglequant.search.smallest import SearchPoint, SearchResult

# six prompts' (drafts, accepted) of a candidate and of its source: a change of -0.19 [-0.45, +0.07] tokens
CANDIDATE = [(10, 14), (12, 12), (9, 16), (11, 13), (10, 15), (13, 11)]
SOURCE = [(10, 15), (11, 15), (9, 15), (11, 14), (10, 15), (12, 14)]


def _prediction(rows: list[tuple[int, int]]) -> Prediction:
    def acceptance(counts: list[tuple[int, int]]) -> Acceptance:
        return Acceptance(tuple(PromptCounts(d, a, (), ()) for d, a in counts))

    quantized, source = acceptance(rows), acceptance(SOURCE)
    return Prediction(source, quantized, paired_difference(quantized, source), None, "6 sequences")


def test_a_straddling_candidate_is_inconclusive_and_not_within() -> None:
    prediction, budget = _prediction(CANDIDATE), Budget.parse("0.2")
    assert prediction.difference.low < -0.2 < prediction.difference.high
    assert not budget.within(prediction, 0.2) and budget.inconclusive(prediction, 0.2)
    judged = budget.judged_text(prediction, 0.2)
    assert "inconclusive" in judged and "more prompts would settle it at this variance" in judged
    point = Budget.parse("0.2", rule="point")  # the estimate alone: no interval, so never inconclusive
    assert not point.inconclusive(prediction, 0.2) and "estimate within" in point.judged_text(prediction, 0.2)


def test_the_search_names_the_inconclusive_candidate_it_did_not_pick() -> None:
    unsettled = SearchPoint(Candidate("nvfp4", "modelopt", False, None), 1000, _prediction(CANDIDATE), False)
    picked = SearchPoint(Candidate("fp8-block", "quark", False, None), 1500, _prediction(SOURCE), True)
    result = SearchResult(
        Path("src"), Path("out"), Budget.parse("0.2"), 0.2, 2.4, 4000, [unsettled, picked], picked, 1.0
    )
    assert "inconclusive, so not picked: nvfp4 / modelopt" in result.stopped
    settled = SearchResult(Path("src"), Path("out"), Budget.parse("0.2"), 0.2, 2.4, 4000, [picked], picked, 1.0)
    assert "inconclusive" not in settled.stopped
