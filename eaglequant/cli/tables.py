"""Tables that never cut a module name: a table when it fits the terminal, a list when it does not.

Columns holding names are ``no_wrap``, so a table's narrowest rendering keeps every name whole; when even
that is wider than the console, each row is printed as a name followed by its other cells, one per line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from eaglequant.cli.output import out

if TYPE_CHECKING:
    from eaglequant.prediction.figures import TableRow
    from eaglequant.readback.cost import Baseline, RoundCost
    from eaglequant.speedup.model import SpeedupTable


def name_column(table: Table, header: str) -> None:
    """A column of module or tensor names: never wrapped, never truncated."""
    table.add_column(header, no_wrap=True, overflow="ignore")


READABLE = 12  # the narrowest a column that wraps may get before the table reads better as a list


def fits(table: Table, console: Console) -> bool:
    """Name columns at their full width, every other column at least READABLE (or its ``min_width``) wide, or its
    content's width."""
    if Measurement.get(console, console.options, table).minimum > console.width:
        return False
    needed = 1 + 3 * len(table.columns)  # borders and padding
    for column in table.columns:
        cells = [_plain(column.header), *(_plain(cell) for cell in column.cells)]
        widest = max((len(line) for cell in cells for line in cell.splitlines()), default=0)
        needed += widest if column.no_wrap else min(widest, max(READABLE, column.min_width or 0))
    return needed <= console.width


def show(table: Table) -> None:
    """Print ``table`` on stdout as a table if it fits, else as a list."""
    console = out.console
    if fits(table, console):
        if table.title:  # a title of its own: rich pads a table's title line with spaces to the table's width
            console.print(Text(_plain(table.title), style=table.title_style or "table.title"))
            table.title = None
        console.print(table)
        return
    console.print(as_list(table))


def as_list(table: Table) -> Text:
    """Each row as its first cell, then ``header: cell`` for the others, indented."""
    text = Text()
    if table.title:
        text.append(_plain(table.title) + "\n", style="bold")
    columns = [(_plain(column.header), list(column.cells)) for column in table.columns]
    rows = len(columns[0][1]) if columns else 0
    for index in range(rows):
        heading = _plain(columns[0][1][index])
        if heading:
            text.append(heading + "\n")
        for header, cells in columns[1:]:
            cell = _plain(cells[index])
            if cell:
                joined = cell.replace("\n", "; ")
                text.append(f"    {header}: {joined}\n")
    return text


def _plain(cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return escape(str(cell))


def show_round_costs(costs: list[RoundCost], baseline: Baseline | None = None) -> None:
    """The weight bytes each engine reads per speculative round, part by part, against ``baseline``'s (default: the
    head it was converted from), which is named."""
    from eaglequant.common.sizes import decimal_bytes
    from eaglequant.readback.cost import MODEL_NOTE, PARTS, fewer, lm_head_lever

    if not costs:
        return
    k = costs[0].draft_tokens
    table = Table(title=f"weight bytes read per speculative round (k = {k})", title_justify="left")
    table.add_column("engine", no_wrap=True)
    shown = [part for part in PARTS if any(cost.part(part) for cost in costs)]
    for part in shown:
        table.add_column(part, justify="right")
    for header in ("per round", "source", "fewer", "resident"):
        table.add_column(header, justify="right", no_wrap=True)
    against = set()
    for cost in costs:
        ratio, used = fewer(cost, baseline)
        against.add(used.name)
        cells = []
        for name in shown:
            found = cost.part(name)
            cell = "" if found is None else decimal_bytes(found.bytes_per_round)
            if found is not None and found.quantized:
                cell = f"[green]{cell}[/]"
            elif found is not None and found.shared:
                cell += " [dim](target's)[/]"
            cells.append(cell)
        table.add_row(
            f"{cost.engine_release}",
            *cells,
            decimal_bytes(cost.bytes_per_round),
            decimal_bytes(used.bytes_per_round),
            f"{ratio:.2f}×",
            decimal_bytes(cost.resident_bytes),
        )
    show(table)
    out.print(f"  [dim]{escape(MODEL_NOTE)}; green: run quantized[/]", soft_wrap=True)
    out.print(f"  [dim]source and fewer: against {escape(' / '.join(sorted(against)))}[/]", soft_wrap=True)
    for lever in filter(None, map(lm_head_lever, costs)):
        out.print(f"note: {escape(lever)}", soft_wrap=True)


def speedup_table(table: SpeedupTable, title: str) -> Table:
    """k against the predicted acceptance length, the times a round is made of and the speed-up (best k marked)."""
    shown = Table(title=f"{title} ({table.draft})", title_justify="left")
    for header in ("k", "acceptance", "t_verify / t_step", "t_draft / t_step", "speed-up"):
        shown.add_column(header, justify="right")
    best = table.best_draft_tokens
    for point in table.points:
        mark = " [green]best[/]" if point.draft_tokens == best else ""
        shown.add_row(
            str(point.draft_tokens),
            f"{point.acceptance_length:.3f}",
            f"{point.verify_s / point.step_s:.2f}",
            f"{point.draft_s / point.step_s:.2f}",
            f"{point.speedup:.3f}×{mark}",
        )
    return shown


def speedup_grid(tables: list[SpeedupTable]) -> Table:
    """One draft's predicted speed-up [interval] for each k (rows) and concurrency (columns), best k a column
    marked."""
    first = tables[0]
    shown = Table(title=f"predicted decode speed-up over the target alone [interval] ({first.draft})",
                  title_justify="left")  # fmt: skip
    shown.add_column("k", justify="right")
    shown.add_column("acceptance", justify="right")
    for table in tables:
        shown.add_column(f"C = {table.concurrency}", justify="right")
    for point in first.points:
        cells = []
        for table in tables:
            at = table.at(point.draft_tokens)
            assert at is not None
            mark = " [green]best[/]" if at.draft_tokens == table.best_draft_tokens else ""
            cells.append(f"{at.speedup:.2f}× [{at.low:.2f}, {at.high:.2f}]{mark}")
        shown.add_row(str(point.draft_tokens), f"{point.acceptance_length:.3f}", *cells)
    return shown


def speedup_terms(tables: list[SpeedupTable]) -> Table:
    """The terms of each concurrency's figures: a step, and at the best k a verification and the draft's round."""
    shown = Table(title=f"the terms, ms ({tables[0].draft})", title_justify="left")
    for header in ("C", "t_step", "best k", "t_verify", "t_draft", "experts a step / a verification reads"):
        shown.add_column(header, justify="right")
    for table in tables:
        best = table.best
        rho, c, target = table.timing.routing_locality, table.concurrency, table.target
        step, verify = (target.distinct_experts(n, c, rho) for n in (1, best.draft_tokens + 1))
        experts = f"{step:.1f} / {verify:.1f}" if target.experts else "-"
        shown.add_row(str(c), f"{best.step_s * 1e3:.3f}", str(best.draft_tokens), f"{best.verify_s * 1e3:.3f}",
                      f"{best.draft_s * 1e3:.3f}", experts)  # fmt: skip
    return shown


def acceptance_table(rows: Sequence[TableRow] | None) -> Table:
    """Predicted acceptance length for every k (tokens drafted a round), a prediction's ``by_draft_tokens``: the
    source's, DST's and the change, each with its 95% interval."""
    table = Table(title="predicted acceptance length by k, tokens drafted a round [95%]", title_justify="left")
    for header in ("k", "source", "DST", "change"):
        table.add_column(header, justify="right")
    assert rows is not None, "a prediction without a table"
    for row in rows:
        table.add_row(str(row.draft_tokens), row.source.text(), row.quantized.text(), row.difference.text(signed=True))
    return table
