"""``eaglequant schemes``: the built-in schemes and the formats that store them."""

from __future__ import annotations

import typer
from rich.table import Table

from eaglequant.cli.options import JsonOpt
from eaglequant.cli.output import err, print_json


def schemes_command(json_out: JsonOpt = False) -> None:
    """List the built-in schemes (files in schemes/) and which formats can store each."""
    from eaglequant.cli import run_guarded

    def body() -> None:
        from eaglequant.formats import FORMATS
        from eaglequant.schemes import builtin_scheme_names, load_scheme

        rows = []
        for name in builtin_scheme_names():
            scheme = load_scheme(name)
            formats = [f.name for f in FORMATS.values() if f.supports(scheme)]
            rows.append({"name": scheme.name, "summary": scheme.summary, "formats": formats, "file": scheme.source})
        if json_out:
            print_json(rows)
            return
        table = Table("scheme", "formats", "summary")
        for row in rows:
            table.add_row(str(row["name"]), ", ".join(row["formats"]), str(row["summary"]))
        err.print(table)

    run_guarded(body)


def register(app: typer.Typer) -> None:
    app.command("schemes")(schemes_command)
