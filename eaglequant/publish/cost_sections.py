"""The model card's sections on what the draft costs: the weight bytes a round reads per engine, and, for a draft
``eaglequant search`` chose, the candidates it predicted and why it stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglequant.common.sizes import decimal_bytes
from eaglequant.measurement.statistics import format_interval
from eaglequant.readback.cost import MODEL_NOTE, PARTS, PartCost, lm_head_lever
from eaglequant.record.report import ConversionReport

if TYPE_CHECKING:
    from eaglequant.record.search import SearchRecord


def round_cost_section(report: ConversionReport) -> str:
    if not report.round_costs:
        return ""
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
    for cost in report.round_costs:
        cells = [_part_cell(cost.part(name)) for name in PARTS]
        totals = (decimal_bytes(cost.bytes_per_round), decimal_bytes(cost.source_bytes_per_round))
        lines.append(
            f"| {cost.engine_release} | {' | '.join(cells)} | {totals[0]} | {totals[1]} | "
            f"{cost.reduction:.2f}× | {decimal_bytes(cost.resident_bytes)} |"
        )
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
        "| candidate | bytes / round | fewer | predicted Δ | within |",
        "|---|---:|---:|---|---|",
    ]
    for row in search.frontier:
        if row.difference is None:
            continue
        fewer = search.source_bytes_per_round / max(row.bytes_per_round, 1)
        lines.append(
            f"| {row.candidate} | {decimal_bytes(row.bytes_per_round)} | {fewer:.2f}× | "
            f"{format_interval(*row.difference, True)} | {'yes' if row.within_budget else 'no'} |"
        )
    return "\n".join(lines) + "\n"
