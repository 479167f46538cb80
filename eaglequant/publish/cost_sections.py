"""The model card's sections on what the draft costs: the weight bytes a round reads per engine, and, for a draft
``eaglequant search`` chose, the candidates it predicted and why it stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglequant.common.sizes import decimal_bytes
from eaglequant.measurement.statistics import format_interval
from eaglequant.readback.cost import MODEL_NOTE, PARTS, PartCost, lm_head_lever
from eaglequant.record.report import ConversionReport

if TYPE_CHECKING:
    from eaglequant.record.search import Interval, SearchRecord


def round_cost_section(report: ConversionReport, search: SearchRecord | None = None) -> str:
    """``search``: what the search that chose the draft recorded; "fewer" is then against the source it started
    from, as ``search`` said it, else against the head the draft was converted from (named either way)."""
    from eaglequant.readback.cost import fewer
    from eaglequant.record.search import searched_baseline

    if not report.round_costs:
        return ""
    baseline = searched_baseline(search)
    k = report.round_costs[0].draft_tokens
    lines = [
        f"## Cost of a draft round (k = {k})",
        "",
        f"Weight bytes each engine reads per speculative round of {k} drafted tokens: {MODEL_NOTE}. A part run "
        "quantized is marked *q*; one the draft reads from the target is marked *target*.",
        "",
        "| engine | " + " | ".join(PARTS) + " | per round | source | fewer | resident |",
        "|---|" + "---:|" * (len(PARTS) + 4),
    ]
    against = set()
    for cost in report.round_costs:
        ratio, used = fewer(cost, baseline)
        against.add(used.name)
        cells = [_part_cell(cost.part(name)) for name in PARTS]
        totals = (decimal_bytes(cost.bytes_per_round), decimal_bytes(used.bytes_per_round))
        lines.append(
            f"| {cost.engine_release} | {' | '.join(cells)} | {totals[0]} | {totals[1]} | "
            f"{ratio:.2f}× | {decimal_bytes(cost.resident_bytes)} |"
        )
    lines += ["", f"*source* and *fewer*: against {' / '.join(sorted(against))}."]
    levers = [lever for lever in map(lm_head_lever, report.round_costs) if lever]
    if levers:
        lines += ["", *(f"- `lm_head`{lever.removeprefix('lm_head')}." for lever in levers)]
    return "\n".join(lines) + "\n"


def _part_cell(part: PartCost | None) -> str:
    if part is None:
        return ""
    marks = [mark for mark, on in (("q", part.quantized), ("target", part.shared)) if on]
    return decimal_bytes(part.bytes_per_round) + (f" *{', '.join(marks)}*" if marks else "")


def search_section(search: SearchRecord | None) -> str:
    if search is None:
        return ""
    given = search.budget
    budget = f"{given.value:.1%} of the source's accepted tokens" if given.relative else "an absolute budget"
    chosen = "none" if search.chosen is None else search.chosen.candidate
    lines = [
        "## How this draft was chosen",
        "",
        f"`eaglequant search` chose **{chosen}**: {search.stopped}. Budget: a predicted greedy acceptance drop "
        f"of at most {given.tokens:.3f} tokens ({budget}; judged on the drop's "
        f"{'95% bound' if given.rule == 'bound' else 'estimate'}), replayed on captured inputs.",
        "",
        "| candidate | bytes / round | fewer | predicted change [95%]: the bound that decided | within |",
        "|---|---:|---:|---|---|",
    ]
    for row in search.frontier:
        if row.difference is None:
            continue
        fewer = search.source_bytes_per_round / max(row.bytes_per_round, 1)
        lines.append(
            f"| {row.candidate} | {decimal_bytes(row.bytes_per_round)} | {fewer:.2f}× | "
            f"{_judged(row.difference, given.tokens, given.rule, row.within_budget)} | "
            f"{'yes' if row.within_budget else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def _judged(difference: Interval, tokens: float, rule: str, within: bool | None) -> str:
    """``-0.028 [-0.061, +0.005]: bound -0.061, a drop of 0.061 past the 0.05 budget``, as ``search`` printed it."""
    from eaglequant.measurement.statistics import bound_text

    value, low, _ = difference
    shown = format_interval(*difference, True)
    if rule != "bound":
        return f"{shown}: estimate {'within' if within else 'past'} the {tokens:g} budget"
    return f"{shown}: {bound_text(None if value is None else low, tokens, bool(within))}"


def speedup_section(search: SearchRecord | None) -> str:
    """For a draft ``search --objective speedup`` chose: the predicted speed-up at each k the budget allowed, the k
    the serving lines draft, the runner-up, and what the model assumed."""
    if search is None or search.speedup is None:
        return ""
    speed = search.speedup
    runner = (
        ""
        if speed.runner_up is None
        else f" The runner-up was {speed.runner_up} at k = {speed.runner_up_draft_tokens} "
        f"({speed.runner_up_speedup:.3f}×)."
    )
    lines = [
        "## Predicted speed-up",
        "",
        f"`eaglequant search --objective speedup` chose this draft and **k = {speed.draft_tokens}** (the serving lines "
        f"below draft as many): a predicted decode speed-up of **{speed.speedup:.3f}×** over `{speed.target}` alone "
        f"on {speed.tensor_parallel_size} rank(s), this draft's rounds priced in {speed.engine}. The BF16 source "
        f"draft: {speed.source_speedup:.3f}× at k = {speed.source_draft_tokens}.{runner}",
        "",
        "| k | predicted acceptance length | predicted speed-up |",
        "|---:|---:|---:|",
        *(
            f"| {at.draft_tokens} | {at.acceptance_length:.3f} | {at.speedup:.3f}×"
            + (" (chosen)" if at.draft_tokens == speed.draft_tokens else "")
            + " |"
            for at in speed.by_draft_tokens
        ),
        "",
        "A k missing from the table lost more acceptance than the budget allows. The model assumed:",
        "",
        *(f"- {line}" for line in speed.assumptions),
    ]
    return "\n".join(lines) + "\n"
