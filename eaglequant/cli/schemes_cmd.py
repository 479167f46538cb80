"""``eaglequant schemes``: the built-in schemes, the formats that store them and the engines that load them."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.output import out, result
from eaglequant.cli.tables import fits, name_column
from eaglequant.common.json_fields import JsonRecord

if TYPE_CHECKING:
    from eaglequant.engines.support_tables import ModuleRow
    from eaglequant.schemes.model import Scheme


def schemes_command(
    show: Annotated[
        Optional[str],  # noqa: UP045 - Typer needs Optional here on Python 3.10
        typer.Option("--show", help="Print one scheme's TOML file (a built-in name or a .toml path)."),
    ] = None,
) -> None:
    """List the built-in schemes (files in schemes/), the formats that store each and the engines that load it."""

    def body() -> None:
        from eaglequant.schemes.model import builtin_scheme_names, load_scheme, scheme_path

        if show is not None:
            scheme = load_scheme(show)  # validates
            text = scheme_path(show).read_text(encoding="utf-8")
            result({"name": scheme.name, "file": scheme.source, "toml": text}, lambda: typer.echo(text, nl=False))
            return
        from eaglequant.engines.support_tables import module_table

        rows = [_row(load_scheme(name)) for name in builtin_scheme_names()]
        modules = module_table()
        data = {"schemes": [row.to_json() for row in rows], "modules": [row.to_json() for row in modules]}

        def shown() -> None:
            render(rows)
            render_modules(modules)

        result(data, shown)

    run_guarded(body)


@dataclass(frozen=True)
class EngineCell(JsonRecord):
    """Whether an engine loads a scheme in a format: its support-matrix cell, and whether it needs the target's
    layer count to read the format's exclusions."""

    loads: bool
    conditional: bool
    note: str
    needs_target_layers: bool
    where: str = ""  # a conditional cell's hardware or versions


@dataclass(frozen=True)
class FormatRow(JsonRecord):
    """A format that stores the scheme, and each engine's cell (None: the matrix has none)."""

    format: str
    algorithm: str | None
    engines: dict[str, EngineCell | None]


@dataclass(frozen=True)
class SchemeRow(JsonRecord):
    name: str
    label: str
    summary: str
    file: str
    formats: tuple[FormatRow, ...]


# A cell whose engine matches this format's exclusions by exact name (vLLM reading a native fp8 config).
NEEDS_L = "+L"
NEEDS_L_MEANS = (
    "keeping a decoder linear unquantized (--exclude, or one the scheme cannot store, as on the bundled fixtures) "
    "needs the target's layer count, --target-layers N"
)
SUMMARY_WIDTH = 32  # the narrowest the summary column may get before the table reads better as a list


def render(rows: list[SchemeRow]) -> None:
    """A table when every name fits whole beside a readable summary, else a list (as inspect, explain, verify)."""
    from eaglequant.engines.support import ENGINE_NAMES

    table = Table()
    name_column(table, "scheme")
    table.add_column("label", no_wrap=True)
    name_column(table, "format")
    for engine in ENGINE_NAMES:  # headed by the names --engine takes
        table.add_column(engine, no_wrap=True)
    table.add_column("summary", min_width=SUMMARY_WIDTH)
    for row in rows:
        for i, fmt in enumerate(row.formats):
            cells = [_mark(fmt.engines[e]) for e in ENGINE_NAMES]
            first = (escape(row.name), row.label) if i == 0 else ("", "")
            table.add_row(*first, fmt.format, *cells, escape(row.summary) if i == 0 else "")
    if fits(table, out.console):
        out.print(table)
    else:
        _render_list(rows, ENGINE_NAMES)
    width = max(out.console.width, 40)
    marks = ["yes: loads", "yes* (where): loads only on the hardware or versions named", "no: refused"]
    for line in _packed("", marks, " · ", width):
        out.print(escape(line))
    for line in _packed("releases: ", [_release(name) for name in ENGINE_NAMES], "; ", width):
        out.print(escape(line))
    if any(cell and cell.needs_target_layers for row in rows for f in row.formats for cell in f.engines.values()):
        for line in textwrap.wrap(f"{NEEDS_L}: {NEEDS_L_MEANS}", width=width, break_on_hyphens=False):
            out.print(escape(line))
    out.print("each cell's engine source: eaglequant schemes --json, or docs/engines.md")


def _packed(first: str, entries: list[str], separator: str, width: int) -> list[str]:
    """``first`` then ``entries`` joined by ``separator``, in lines of at most ``width``, never breaking an entry
    (an entry wider than the line gets a line of its own)."""
    lines, line = [], first
    for i, entry in enumerate(entries):
        piece = entry + (separator.rstrip() if i < len(entries) - 1 else "")
        joined = f"{line}{' ' if line.strip() and i else ''}{piece}"
        if len(joined) > width and line.strip():
            lines.append(line)
            line = "  " + piece
        else:
            line = joined
    return [*lines, line]


def render_modules(rows: list[ModuleRow]) -> None:
    """What each engine release runs per module, per format: yes, no, or the drafts it holds for."""
    from eaglequant.engines.support_tables import QUESTIONS

    out.print("what each engine runs per module (engine, format):")
    table = Table()
    name_column(table, "engine")
    name_column(table, "format")
    for title in QUESTIONS.values():
        table.add_column(title)
    for row in rows:
        table.add_row(escape(row.engine), row.format, *(_answer_mark(row.mark(q)) for q in QUESTIONS))
    if fits(table, out.console):
        out.print(table)
    else:
        for row in rows:
            cells = [f"{title} {_answer_mark(row.mark(q))}" for q, title in QUESTIONS.items()]
            for line in _wrapped_cells(f"{escape(row.engine)} {row.format}: ", cells, max(out.console.width, 40)):
                out.print(line, markup=True)
    note = (
        "Llama / MLA: only for those drafts; the engine source behind each answer: eaglequant schemes --json, "
        "or docs/engines.md#what-each-engine-runs-per-module"
    )
    for line in textwrap.wrap(note, width=max(out.console.width, 40), break_on_hyphens=False):
        out.print(escape(line))


def _answer_mark(mark: str) -> str:
    return {"yes": "[green]yes[/]", "no": "[red]no[/]", "not loaded": "[dim]not loaded[/]"}.get(
        mark, f"[yellow]{mark}[/]"
    )


def _release(name: str) -> str:
    """A column's engine name (what --engine takes) and the release it stands for: ``vllm==0.33.0: vLLM 0.33.0``."""
    from eaglequant.engines import engine_title

    return f"{name}: {engine_title(name)}"


def _render_list(rows: list[SchemeRow], engines: tuple[str, ...]) -> None:
    """Each scheme as its name and label, its summary, then one line per format: what each engine does."""
    for row in rows:
        out.print(f"[bold]{escape(row.name)}[/]  {escape(row.label)}", markup=True)
        for line in textwrap.wrap(row.summary, width=max(out.console.width - 4, 20), break_on_hyphens=False):
            out.print(f"    {escape(line)}")
        for fmt in row.formats:
            cells = [f"{e} {_mark(fmt.engines[e])}" for e in engines if fmt.engines[e] is not None]
            for line in _wrapped_cells(f"    {fmt.format}: ", cells, max(out.console.width, 40)):
                out.print(line, markup=True)


def _row(scheme: Scheme) -> SchemeRow:
    from eaglequant.engines import ENGINES, get_engine
    from eaglequant.engines.support import ENGINE_NAMES, support
    from eaglequant.formats import FORMATS

    written = scheme.without_calibration() if scheme.if_uncalibrated == "weight-only" else scheme
    formats = []
    for fmt in FORMATS.values():
        if not fmt.supports(scheme):
            continue
        engines: dict[str, EngineCell | None] = {}
        for engine in ENGINE_NAMES:
            cell = support(scheme.kinds, fmt.name, ENGINES[engine])
            engines[engine] = (
                None
                if cell is None
                else EngineCell(
                    cell.loads,
                    cell.conditional,
                    cell.note,
                    cell.loads and not get_engine(engine).dialect(fmt).any_layer,
                    cell.where,
                )
            )
        formats.append(FormatRow(fmt.name, fmt.algorithm(scheme), engines))
    label = scheme.label if written is scheme else f"{scheme.label} (calibrated) / {written.label}"
    return SchemeRow(scheme.name, label, scheme.summary, scheme.source, tuple(formats))


def _wrapped_cells(first: str, cells: list[str], width: int) -> list[str]:
    """``first`` then the marked-up cells, comma-separated, in lines of at most ``width`` visible characters."""
    from rich.text import Text

    lines, line, shown = [], first, len(first)
    for i, cell in enumerate(cells):
        piece = cell + ("," if i < len(cells) - 1 else "")
        size = len(Text.from_markup(piece).plain)
        if shown + 1 + size > width and shown > len(first):
            lines.append(line)
            line, shown = "      ", 6
        elif shown > len(first) or not first.endswith(" "):
            line, shown = line + " ", shown + 1
        line, shown = line + piece, shown + size
    return [*lines, line]


def _mark(cell: EngineCell | None) -> str:
    if cell is None:
        return ""
    if not cell.loads:
        return "[red]no[/]"
    mark = f"[yellow]yes* ({escape(cell.where)})[/]" if cell.conditional else "[green]yes[/]"
    return f"{mark} {NEEDS_L}" if cell.needs_target_layers else mark


def register(app: typer.Typer) -> None:
    app.command("schemes", cls=Command)(schemes_command)
