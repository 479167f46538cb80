"""``eaglequant batch-merge SUMMARY...``: one table from the summaries of the runners of a CI matrix.

A top-level command rather than ``batch merge``: ``batch`` takes the job file as its argument, and a Typer
group cannot also take one, so ``batch merge`` would either break ``eaglequant batch JOBS.toml`` or make a job
file named ``merge`` mean something else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.output import out, plural, result
from eaglequant.common.atomic import write_json
from eaglequant.common.errors import EXIT_JOBS_FAILED

if TYPE_CHECKING:
    from eaglequant.batch.summary import MergedSummary

_STYLES = {"converted": "green", "skipped": "cyan", "failed": "bold red", "missing": "bold red"}


def batch_merge_command(
    summaries: Annotated[
        list[Path],
        typer.Argument(
            help="The JSON summaries `eaglequant batch --summary` wrote.", metavar="SUMMARY...", show_default=False
        ),
    ],
    output: Annotated[
        Optional[Path],  # noqa: UP045 - Typer needs Optional here on Python 3.10
        typer.Option("--summary", help="Also write the merged summary to this file.", show_default=False),
    ] = None,
) -> None:
    """Merge the summaries of one job file's runners (a CI matrix) into one table.

    Exits 4 when a job failed or no summary reports it, 2 when the files are not summaries of one job file.
    """

    def body() -> bool:
        from eaglequant.batch.summary import merge_summaries

        merged = merge_summaries(summaries)
        data = merged.to_json()
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            write_json(output, data)
        result(data, lambda: _print_table(merged))
        return merged.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_JOBS_FAILED)


def _print_table(merged: MergedSummary) -> None:
    table = Table(box=None, pad_edge=False)
    table.add_column("job", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("verify", no_wrap=True)
    table.add_column("upload", no_wrap=True)
    table.add_column("why", overflow="fold")
    for job in merged.jobs:
        verified = {True: "ok", False: "failed", None: "-"}.get(job.verified, "-")
        style = _STYLES.get(job.status, "")
        status = f"[{style}]{job.status}[/]"
        table.add_row(escape(job.name), status, verified, job.upload_status or "-", escape(str(job.reason)))
    out.print(table)
    summaries = plural(len(merged.summaries), "summary", "summaries")
    out.print(", ".join(f"{n} {what}" for what, n in merged.counts.items()) + f" (from {summaries})")


def register(app: typer.Typer) -> None:
    app.command("batch-merge", cls=Command)(batch_merge_command)
