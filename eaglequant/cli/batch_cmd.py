"""``eaglequant batch JOBS.toml``: run many conversions (and uploads) as one CI step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from eaglequant.cli.command import Command
from eaglequant.cli.output import MODE, info, out, quiet_hub_progress, result
from eaglequant.errors import EXIT_JOBS_FAILED


def batch_command(
    jobs_file: Annotated[
        Path,
        typer.Argument(
            help="TOML job file (see fixtures/batch-example.toml).", metavar="JOBS.toml", show_default=False
        ),
    ],
    summary: Annotated[Path, typer.Option("--summary", help="Where to write the JSON summary of every job.")] = Path(
        "eaglequant-batch-summary.json"
    ),
    only: Annotated[
        Optional[list[str]],  # noqa: UP045 - Typer needs Optional here on Python 3.10
        typer.Option("--only", help="Run only the job with this name. Repeatable.", show_default=False),
    ] = None,
) -> None:
    """Run the conversions (and uploads) a TOML job file lists, as one CI step.

    Jobs whose destination is complete and made from the same source and options are skipped; a failed job
    does not stop the others. Exits 4 if any failed.
    """
    from eaglequant.cli import run_guarded

    def body() -> bool:
        from eaglequant.batch import run_batch

        quiet_hub_progress()
        outcome = run_batch(jobs_file, only=only or [], on_job=_report_job)
        data = outcome.to_json()
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        result(data, lambda counted: render(counted, summary))
        return outcome.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_JOBS_FAILED)


def render(data: dict[str, Any], summary: Path) -> None:
    counts = data["counts"]
    out.print(
        f"{counts['converted']} converted, {counts['skipped']} skipped, {counts['failed']} failed, "
        f"{counts['uploaded']} uploaded; summary in {escape(str(summary.absolute()))}",
        soft_wrap=True,
    )


# The manifest's short reasons for converting, as a sentence a reader follows.
_WHY_CONVERTED = {"absent": "nothing at its destination yet", "no report": "its destination has no eaglequant report"}


def _report_job(number: int, total: int, outcome: Any) -> None:
    """Progress: one line per finished job on stderr (the summary is the result)."""
    if MODE.quiet:
        return
    data = outcome.to_json()
    style = {"converted": "green", "skipped": "cyan", "failed": "bold red"}[data["status"]]
    reason = _WHY_CONVERTED.get(data["reason"], data["reason"])
    verified = {True: "; verified", False: "", None: ""}[data["verified"]]
    info(
        f"[{number}/{total}] {escape(data['name'])}: [{style}]{data['status']}[/] ({escape(reason)}){verified}",
        markup=True,
    )
    upload = data["upload"]
    if upload:
        text = upload.get("commit_url") or upload.get("error") or ""
        info(f"      upload to {escape(upload['repo_id'])}: {upload['status']} {escape(text)}", markup=True)


def register(app: typer.Typer) -> None:
    app.command("batch", cls=Command)(batch_command)
