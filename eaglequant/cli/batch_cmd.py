"""``eaglequant batch JOBS.toml``: run many conversions (and uploads) as one CI step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from eaglequant.cli.options import JsonOpt
from eaglequant.cli.output import err, print_json, quiet_hub_progress
from eaglequant.errors import EXIT_JOBS_FAILED


def batch_command(
    jobs_file: Annotated[
        Path, typer.Argument(help="TOML job file (see fixtures/batch-example.toml).", show_default=False)
    ],
    summary: Annotated[Path, typer.Option("--summary", help="Where to write the JSON summary of every job.")] = Path(
        "eaglequant-batch-summary.json"
    ),
    only: Annotated[
        Optional[list[str]],  # noqa: UP045 - Typer needs Optional here on Python 3.10
        typer.Option("--only", help="Run only the job with this name. Repeatable.", show_default=False),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run the conversions (and uploads) a TOML job file lists, as one CI step.

    Jobs whose destination is complete and made from the same source and options are skipped; a failed job
    does not stop the others. Exits 4 if any failed.
    """
    from eaglequant.cli import run_guarded

    def body() -> bool:
        from eaglequant.batch import run_batch

        quiet_hub_progress()
        result = run_batch(jobs_file, only=only or [], on_job=_report_job)
        data = result.to_json()
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        if json_out:
            print_json(data)
        counts = data["counts"]
        err.print(
            f"{counts['converted']} converted, {counts['skipped']} skipped, {counts['failed']} failed, "
            f"{counts['uploaded']} uploaded; summary in {escape(str(summary))}"
        )
        return result.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_JOBS_FAILED)


def _report_job(number: int, total: int, outcome: Any) -> None:
    data = outcome.to_json()
    style = {"converted": "green", "skipped": "cyan", "failed": "bold red"}[data["status"]]
    verified = {True: ", verify ok", False: ", verify FAILED", None: ""}[data["verified"]]
    line = (
        f"[{number}/{total}] {escape(data['name'])}: [{style}]{data['status']}[/] ({escape(data['reason'])}{verified})"
    )
    err.print(line, markup=True, soft_wrap=True)
    upload = data["upload"]
    if upload:
        text = upload.get("commit_url") or upload.get("error") or ""
        err.print(f"      upload to {escape(upload['repo_id'])}: {upload['status']} {escape(text)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("batch")(batch_command)
