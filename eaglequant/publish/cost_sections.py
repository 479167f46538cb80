"""The model card's sections on what the draft costs: the weight bytes a round reads per engine, and, for a draft
``eaglequant search`` chose, the candidates it predicted and why it stopped."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eaglequant.common.sizes import decimal_bytes
from eaglequant.measurement.statistics import format_interval
from eaglequant.readback.cost import MODEL_NOTE, PARTS, PartCost, lm_head_lever
from eaglequant.record.report import ConversionReport

if TYPE_CHECKING:
    from eaglequant.record.search import Interval, SearchRecord, SearchSpeedup


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
    """For a draft ``search --objective speedup`` chose: the predicted speed-up with its interval, the k at each load
    the serving lines serve, a tie within the model's error and how it was broken, the runner-up, the prediction at
    each k the budget allowed, and what the model assumed."""
    if search is None or search.speedup is None:
        return ""
    speed = search.speedup
    runner = (
        ""
        if speed.runner_up is None
        else f" The runner-up was {speed.runner_up} at k = {speed.runner_up_draft_tokens} "
        f"({speed.runner_up_speedup:.3f}×)."
    )
    loads, scheduled = speed.loads, bool(speed.num_speculative_tokens_per_batch_size)
    at = "" if len(loads) < 2 else f", weighted over concurrency {', '.join(str(load.concurrency) for load in loads)}"
    at = at or ("" if not loads else f" at concurrency {loads[0].concurrency}")
    lines = [
        "## Predicted speed-up",
        "",
        f"`eaglequant search --objective speedup` chose this draft and **k = {speed.draft_tokens}** (the serving lines "
        f"below draft as many{', vLLM a k for each batch size' if scheduled else ''}): "
        f"a predicted decode speed-up of **{speed.speedup:.3f}×**{_interval(speed.low, speed.high)} over "
        f"`{speed.target}` alone{at} on {speed.tensor_parallel_size} rank(s), this draft's rounds priced in "
        f"{speed.engine}. The BF16 source draft: {speed.source_speedup:.3f}× at k = {speed.source_draft_tokens}."
        f"{runner}{_tie(speed)}",
        "",
        *_loads_table(speed),
        *_by_k_table(speed),
        "",
        "A k missing from the table lost more acceptance than the budget allows. The model assumed:",
        "",
        *(f"- {line}" for line in speed.assumptions),
    ]
    return "\n".join(lines) + "\n"


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"


def _tie(speed: SearchSpeedup) -> str:
    if not speed.tied:
        return ""
    broken = (
        f" {speed.highest} was predicted highest; the tie went to the fewest bytes a round."
        if speed.highest
        else " This draft was predicted highest and reads the fewest bytes a round of them."
    )
    return f" A tie within the model's error: the intervals of {', '.join(speed.tied)} overlap the highest's.{broken}"


def _loads_table(speed: SearchSpeedup) -> list[str]:
    """The k at each load, where several were asked for."""
    if len(speed.loads) < 2:
        return []
    rows = [
        f"| {load.concurrency} | {load.weight:.3g} | "
        + (f"{load.draft_tokens}" if load.draft_tokens else "0: do not speculate at this load")
        + f" | {load.speedup:.3f}×{_interval(load.low, load.high)} |"
        for load in speed.loads
    ]
    schedule = json.dumps([list(entry) for entry in speed.num_speculative_tokens_per_batch_size])
    served = (
        f"vLLM's `num_speculative_tokens_per_batch_size`: `{schedule}` (inclusive batch-size ranges and their k; "
        "each load's k holds up to the next load, and vLLM carries the last one on past it)."
        if speed.num_speculative_tokens_per_batch_size
        else "One k serves every load, so the serving lines set no schedule."
    )
    header = ["| concurrency | weight | k | predicted speed-up |", "|---:|---:|---|---:|"]
    return [*header, *rows, "", served, ""]


def _by_k_table(speed: SearchSpeedup) -> list[str]:
    """The predicted speed-up at each k the budget allowed, at each load."""
    loads = speed.loads if len(speed.loads) > 1 else ()
    columns = [f"speed-up at concurrency {load.concurrency}" for load in loads] or ["predicted speed-up"]
    tables = [load.by_draft_tokens for load in loads] or [speed.by_draft_tokens]
    served = [load.draft_tokens for load in loads] or [speed.draft_tokens]
    rows = []
    for i, at in enumerate(tables[0]):
        cells = [
            f"{table[i].speedup:.3f}×{_interval(table[i].low, table[i].high)}"
            + (" (chosen)" if table[i].draft_tokens == k else "")
            for table, k in zip(tables, served, strict=True)
        ]
        rows.append(f"| {at.draft_tokens} | {at.acceptance_length:.3f} | {' | '.join(cells)} |")
    header = f"| k | predicted acceptance length | {' | '.join(columns)} |"
    return [header, "|---:|---:|" + "---:|" * len(columns), *rows]
