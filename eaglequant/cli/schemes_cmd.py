"""``eaglequant schemes``: the built-in schemes, the formats that store them and the engines that load them."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.output import out, result


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
            result({"name": scheme.name, "file": scheme.source, "toml": text}, lambda data: typer.echo(text, nl=False))
            return
        result([_row(load_scheme(name)) for name in builtin_scheme_names()], render)

    run_guarded(body)


def render(rows: list[dict[str, Any]]) -> None:
    from eaglequant.engines.support import ENGINE_NAMES, ENGINE_TITLES

    table = Table("scheme", "label", "format", *(ENGINE_TITLES[e] for e in ENGINE_NAMES), "summary")
    for row in rows:
        for i, fmt in enumerate(row["formats"]):
            cells = [_mark(fmt["engines"][e]) for e in ENGINE_NAMES]
            first = (escape(row["name"]), row["label"]) if i == 0 else ("", "")
            table.add_row(*first, fmt["format"], *cells, escape(row["summary"]) if i == 0 else "")
    out.print(table)
    out.print("yes: loads · yes*: loads on some hardware or versions (see docs/engines.md) · no: refused")


def _row(scheme):  # type: ignore[no-untyped-def]
    from eaglequant.engines.support import ENGINE_NAMES, support
    from eaglequant.formats import FORMATS

    written = scheme.without_calibration() if scheme.if_uncalibrated == "weight-only" else scheme
    formats = []
    for fmt in FORMATS.values():
        if not fmt.supports(scheme):
            continue
        engines = {}
        for engine in ENGINE_NAMES:
            cell = support(scheme.kinds, fmt.name, engine)
            engines[engine] = (
                None if cell is None else {"loads": cell.loads, "conditional": cell.conditional, "note": cell.note}
            )
        formats.append({"format": fmt.name, "algorithm": fmt.algorithm(scheme), "engines": engines})
    return {
        "name": scheme.name,
        "label": scheme.label if written is scheme else f"{scheme.label} (calibrated) / {written.label}",
        "summary": scheme.summary,
        "file": scheme.source,
        "formats": formats,
    }


def _mark(cell) -> str:  # type: ignore[no-untyped-def]
    if cell is None:
        return ""
    if not cell["loads"]:
        return "[red]no[/]"
    return "[yellow]yes*[/]" if cell["conditional"] else "[green]yes[/]"


def register(app: typer.Typer) -> None:
    app.command("schemes", cls=Command)(schemes_command)
