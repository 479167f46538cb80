"""Issue 55, item 4, "one gate": one rule (the drop's 95% upper bound within the budget) decides a pass in
``verify --inputs``, ``convert --verify``, ``search`` and ``accept``, every line shows the bound that decided, one
sign (DST minus source) for a change, and after ``search`` the pick is judged against the source and budget it
recorded. Issue 63, item 4: an interval that straddles the budget is inconclusive, not a failure, in verify and
search (accept still judges within or not)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from eaglequant.measurement.measure import GREEDY, DraftResult, EngineRun, QuantizedDraft
from eaglequant.measurement.statistics import Acceptance, Interval, Lossless, gate_text, within_budget
from eaglequant.prediction.predict import Prediction
from eaglequant.search.budget import Budget

# The NVFP4 weights: within a 0.1 budget on the estimate, past it on the bound
ESTIMATE_WITHIN_BOUND_PAST = Interval(-0.071, -0.117, -0.025)
BOTH_WITHIN = Interval(-0.071, -0.095, -0.047)


def _prediction(difference: Interval, budget: float | None) -> Prediction:
    return Prediction(Acceptance(()), Acceptance(()), difference, budget, "captured.st (3 sequences)")


def _accepted(difference: Interval, budget: float) -> DraftResult:
    run = EngineRun("0.32.0", None, 1.0, {GREEDY.name: ()})
    draft = DraftResult("dst", Path("dst"), "dequantized", run, Lossless(3, 0, 3, None), scheme="nvfp4", budget=budget)
    draft.difference = {GREEDY.name: difference}
    return draft


@pytest.mark.parametrize(("difference", "within"), [(ESTIMATE_WITHIN_BOUND_PAST, False), (BOTH_WITHIN, True)])
def test_every_command_judges_the_bound_against_the_budget(difference: Interval, within: bool) -> None:
    """verify --inputs and convert --verify (Prediction.judged), search (Budget.within) and accept
    (DraftResult.over_budget) agree with the one function, on the bound, not the estimate; a straddling interval is
    inconclusive in verify, not a failure."""
    assert within_budget(difference, 0.1) is within
    prediction = _prediction(difference, 0.1)
    assert prediction.judged is not None and prediction.judged.within is within
    assert prediction.inconclusive is not within and not prediction.failed
    assert Budget.parse("0.1").within(_prediction(difference, None), 0.1) is within
    assert _accepted(difference, 0.1).over_budget is not within


def test_an_unknown_bound_is_not_within_and_no_budget_never_fails() -> None:
    one_prompt = Interval(-0.01, float("-inf"), float("inf"))
    assert not within_budget(one_prompt, 0.1) and _prediction(one_prompt, 0.1).inconclusive
    assert not _prediction(ESTIMATE_WITHIN_BOUND_PAST, None).failed


def test_each_verdict_shows_the_bound_that_decided_with_the_budget_a_positive_drop() -> None:
    shown = gate_text(Interval(-0.028, -0.061, 0.005), 0.05)
    assert shown == "-0.028 [-0.061, +0.005]: bound -0.061, a drop of 0.061 past the 0.05 budget"
    assert gate_text(Interval(0.05, 0.01, 0.09), 0.05).endswith("bound +0.010, no drop, within the 0.05 budget")
    verdict = _prediction(ESTIMATE_WITHIN_BOUND_PAST, 0.1).verdict
    assert "straddles the 0.1 budget (bound -0.117, estimate within it)" in verdict and "over the budget" not in verdict
    judged = Budget.parse("0.05").judged_text(_prediction(Interval(-0.028, -0.061, 0.005), None), 0.05)
    assert judged.startswith("-0.028 [-0.061, +0.005]: inconclusive") and "-0.05 " not in judged
    past = Budget.parse("0.05").judged_text(_prediction(Interval(-0.2, -0.3, -0.1), None), 0.05)
    assert past == "-0.200 [-0.300, -0.100]: upper bound -0.100, a drop of at least 0.100, " + (
        "the whole interval past the 0.05 budget"
    )


def test_verify_prints_the_bound_that_decided(capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.cli.verify_cmd import _render_acceptance

    _render_acceptance(_prediction(ESTIMATE_WITHIN_BOUND_PAST, 0.1))
    shown = " ".join(capsys.readouterr().out.split())
    assert "change -0.071 [-0.117, -0.025]: inconclusive, the interval straddles the 0.1 budget (bound -0.117" in shown


def test_the_card_shows_the_bound_that_decided_each_candidate() -> None:
    from eaglequant.publish.cost_sections import search_section
    from tests.project.test_record_json import _search

    section = search_section(_search().record())
    assert "predicted change [95%]: the bound that decided" in section and "predicted Δ" not in section
    assert "no bound (one prompt has no spread), within the 0.13 budget | yes |" in section


def _searched_dst(tmp_path: Path, source: Path, tokens: float = 0.05) -> Path:
    """A DST holding a search record: chosen by a search from ``source`` within ``tokens``."""
    from eaglequant.record.search import SEARCH_RECORD
    from tests.project.test_record_json import _search

    record = _search().record()
    record = replace(record, source=str(source), budget=replace(record.budget, tokens=tokens))
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / SEARCH_RECORD).write_text(json.dumps(record.to_json()))
    return dst


def test_accept_judges_a_searched_pick_against_the_searched_source_and_budget(tmp_path: Path) -> None:
    """accept's default source after search is the one search started from, and its budget the search's (not the
    pruned head's and the scheme's), said in the finding; another source keeps the scheme's budget."""
    from eaglequant.measurement.runners import _as_searched, _recorded_source

    source = tmp_path / "original"
    source.mkdir()
    (source / "config.json").write_text("{}")
    dst = _searched_dst(tmp_path, source)
    assert _recorded_source([dst]) == source
    draft = QuantizedDraft(dst, dst, "dequantized", [], "nvfp4", 0.1)
    judged = _as_searched(draft, source)
    assert judged.budget == 0.05 and "`eaglequant search` recorded" in str(judged.budget_from)
    assert _as_searched(draft, tmp_path / "elsewhere").budget == 0.1
    result = replace(_accepted(Interval(0.01, -0.07, 0.09), 0.1), budget=judged.budget, budget_from=judged.budget_from)
    assert result.over_budget and "`eaglequant search` recorded" in result.problems[0].message
