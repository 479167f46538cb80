"""Issue 55, item 4, "one gate": one rule (the drop's 95% upper bound within the budget) decides a pass in
``verify --inputs``, ``convert --verify``, ``search`` and ``accept``, every line shows the bound that decided, one
sign (DST minus source) for a change, and after ``search`` the pick is judged against the source and budget it
recorded. Issue 63, item 4: an interval that straddles the budget is inconclusive, not a failure, in verify,
search and accept (issue 64, item 4: accept judges it at the k the draft is served at)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from eaglequant.measurement.measure import GREEDY, DraftResult, EngineRun, QuantizedDraft
from eaglequant.measurement.statistics import Acceptance, Interval, Lossless, PromptCounts, gate_text, within_budget
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
    (DraftResult.verdict) agree with the one function, on the bound, not the estimate; a straddling interval is
    inconclusive in verify and accept, not a failure."""
    assert within_budget(difference, 0.1) is within
    prediction = _prediction(difference, 0.1)
    assert prediction.judged is not None and prediction.judged.within is within
    assert prediction.inconclusive is not within and not prediction.failed
    written = prediction.record()  # what verify records: the verdict as reached
    assert (written.inconclusive, written.failed, written.verdict) == (not within, False, prediction.verdict)
    assert Budget.parse("0.1").within(_prediction(difference, None), 0.1) is within
    accepted = _accepted(difference, 0.1)
    assert accepted.inconclusive is not within and not accepted.over_budget
    assert [p.code for p in accepted.problems] == [] if within else ["acceptance-inconclusive"]


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

    _render_acceptance(_prediction(ESTIMATE_WITHIN_BOUND_PAST, 0.1).record())
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
    assert result.inconclusive and "`eaglequant search` recorded" in result.problems[0].message


def _prompts(k: int, accepted: list[int], seconds: float) -> tuple[PromptCounts, ...]:
    """One prompt a count of accepted tokens over 10 drafts of ``k``, generating the same tokens, decoding 10 in
    ``seconds``."""
    rows = []
    for total in accepted:
        per_position = tuple(min(10, max(0, total - 10 * j)) for j in range(k))
        rows.append(PromptCounts(10, total, per_position, (1, 2, 3), (), 10, seconds))
    return tuple(rows)


# accepted tokens a prompt, by k: the source's, and a DST's far past a 0.1 budget at k = 1 and straddling it at 3
SOURCE = {1: [8, 8, 8, 8], 3: [20, 22, 18, 20]}
DST = {1: [2, 3, 2, 3], 3: [19, 22, 17, 21]}


def _measured(served: int):  # type: ignore[no-untyped-def]
    from eaglequant.measurement.measure import Settings, measure

    def runner_at(settings: Settings):  # type: ignore[no-untyped-def]
        k = settings.draft_tokens
        counts = {0: _prompts(k, [0] * 4, 1.0), 1: _prompts(k, SOURCE[k], 0.9), 2: _prompts(k, DST[k], 0.9)}
        return lambda place, _draft, _label: EngineRun("0.32.0", None, 1.0, {GREEDY.name: counts[place]})

    settings = Settings(Path("t"), ("a", "b", "c", "d"), "x", 1, 8, (GREEDY,), more_draft_tokens=(3,))
    draft = QuantizedDraft(Path("dst"), Path("dst"), "stored", [], "nvfp4", 0.1, served_draft_tokens=served)
    return measure(settings, Path("src"), [draft], runner_at, measure_same_bytes_once=False)


def test_accept_judges_the_k_the_draft_is_served_at_three_ways() -> None:
    """Issue 64, item 4: measured at k = 1 (the first given) and 3, accept judges the budget at the k the draft is
    served at (3, the default) where it was measured: there the interval straddles the budget, inconclusive, exit 7
    with the prompts that would settle it; served at a k not measured (5), the first k is judged: past, exit 3."""
    report = _measured(served=3)
    (draft,) = report.quantized
    assert draft.judged_draft_tokens == 3 and draft.verdict is not None and draft.verdict.inconclusive
    assert draft.by_draft_tokens[0].draft_tokens == 1 and draft.difference[GREEDY.name].high < -0.1  # k = 1: past
    assert [p.code for p in report.problems] == ["acceptance-inconclusive"] and report.exit_code == 7
    message = report.problems[0].message
    assert "straddles the 0.1 budget" in message and "more prompts would settle it" in message
    assert message.endswith("judged at k = 3, the k the card serves")
    elsewhere = _measured(served=5)
    (draft,) = elsewhere.quantized
    assert draft.judged_draft_tokens == 1 and draft.over_budget and elsewhere.exit_code == 3
    assert [p.code for p in elsewhere.problems] == ["over-budget"]
    assert elsewhere.problems[0].message.endswith("judged at k = 1, the first k measured (the card serves k = 5, not "
                                                  "measured)")  # fmt: skip


def test_one_k_and_a_list_of_them_are_checked_in_one_place() -> None:
    """The k of every command is read by common/draft_tokens.py: one k (returned as checked), or several."""
    from eaglequant.common.draft_tokens import check_draft_tokens, each_draft_tokens, judged_draft_tokens
    from eaglequant.common.errors import InputError

    assert check_draft_tokens(4) == 4 and each_draft_tokens("1, 2,3") == (1, 2, 3) and each_draft_tokens(5) == (5,)
    for wrong in (0, 65, True, "3"):
        with pytest.raises(InputError, match="tokens drafted a round must be 1 to 64"):
            check_draft_tokens(wrong)
    with pytest.raises(InputError, match="0 is not a whole number of tokens from 1 to 64"):
        each_draft_tokens("3,0")
    assert (
        judged_draft_tokens((1, 3)) == 3 and judged_draft_tokens((1, 2), 3) == 1 and judged_draft_tokens((4,), 4) == 4
    )


def test_verify_and_accept_judge_at_the_k_a_search_chose(tmp_path: Path) -> None:
    """A DST whose search chose k = 1 (``--objective speedup``) is judged at k = 1 by verify (its prediction
    settings) and by accept (its draft); without a search, at the default k = 3; a served k past the table's
    ``--max-draft-tokens`` extends the table to it."""
    from eaglequant.measurement.runners import _as_searched
    from eaglequant.prediction.predict import PredictionSettings
    from eaglequant.verification.verify import _judged_at_served_k
    from tests.project.test_record_round_trip import _search_speedup

    source = tmp_path / "original"
    dst = _searched_dst(tmp_path, source)
    plain = PredictionSettings()
    assert _judged_at_served_k(plain, dst).draft_tokens == 3  # a search for the smallest chose no k
    record_path = dst / "eaglequant_search.json"
    record = json.loads(record_path.read_text())
    record["speedup"] = _search_speedup().to_json()  # its k is 1
    record_path.write_text(json.dumps(record))
    assert _judged_at_served_k(plain, dst).draft_tokens == 1 and _judged_at_served_k(plain, None).draft_tokens == 3
    draft = QuantizedDraft(dst, dst, "dequantized", [], "nvfp4", 0.1)
    assert _as_searched(draft, source).served_draft_tokens == 1
    assert PredictionSettings(4, draft_tokens=6).tabulated == 6 and plain.tabulated == 8
