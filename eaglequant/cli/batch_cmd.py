"""``eaglequant batch JOBS.toml``: run many conversions (and uploads) as one CI step."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from eaglequant.batch.summary import JobStatus, UploadStatus
from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.output import MODE, info, note, out, quiet_hub_progress, result
from eaglequant.common.atomic import write_json
from eaglequant.common.errors import EXIT_JOBS_FAILED, InputError

if TYPE_CHECKING:
    from eaglequant.batch.jobs import BatchResult, JobOutcome


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
    shard: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--shard",
            metavar="K/N",
            help="Run the K-th of N even slices of the jobs: those at positions K, K+N, K+2N, ... in the file.",
            show_default=False,
        ),
    ] = None,
    list_jobs: Annotated[
        bool, typer.Option("--list", help="Check the whole file and print the job names; run nothing.")
    ] = False,
) -> None:
    """Run the conversions (and uploads) a TOML job file lists, as one CI step.

    Skips a job whose Hub repo (with [job.upload]) or destination holds its output from the same source and options.

    Otherwise it converts (and uploads) the job; a failed job does not stop the others, and the command exits 4 if
    any failed. --list --json: the job names, for a CI matrix.
    """

    def body() -> bool:
        from eaglequant.batch.jobs import load_jobs, run_batch, select_jobs

        if only and shard is not None:
            raise InputError("--only and --shard both select jobs", hint="pass one of them")
        selection = _shard(shard)
        if list_jobs:
            names = [job.name for job in select_jobs(jobs_file, load_jobs(jobs_file), only or [], selection)]
            result(names, lambda: _render_names(names), one_line=True)
            return True
        quiet_hub_progress()
        outcome = run_batch(jobs_file, only=only or [], shard=selection, on_job=_report_job, on_note=note)
        data = outcome.to_json()
        summary.parent.mkdir(parents=True, exist_ok=True)
        write_json(summary, data)
        result(data, lambda: render(outcome, summary))
        return outcome.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_JOBS_FAILED)


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise InputError(f"--shard {text}: not a slice K/N with 1 <= K <= N", hint="e.g. --shard 2/4")
    return int(match[1]), int(match[2])


def _render_names(names: list[str]) -> None:
    sys.stdout.write("".join(f"{name}\n" for name in names))


def render(outcome: BatchResult, summary: Path) -> None:
    counts = outcome.counts
    out.print(
        f"{counts[JobStatus.CONVERTED]} converted, {counts[JobStatus.SKIPPED]} skipped, {counts[JobStatus.FAILED]} "
        f"failed, {counts[UploadStatus.UPLOADED]} uploaded; summary in {escape(str(summary.absolute()))}",
        soft_wrap=True,
    )


# The manifest's short reasons for converting, as a sentence a reader follows.
_WHY_CONVERTED = {"absent": "nothing at its destination yet", "no report": "its destination has no eaglequant report"}
_STYLES = {JobStatus.CONVERTED: "green", JobStatus.SKIPPED: "cyan", JobStatus.FAILED: "bold red"}


def _report_job(number: int, total: int, outcome: JobOutcome) -> None:
    """Progress: one line per finished job on stderr (the summary is the result)."""
    if MODE.quiet:
        return
    reason = _WHY_CONVERTED.get(outcome.reason, outcome.reason)
    verified = "; verified" if outcome.verified else ""
    info(
        f"[{number}/{total}] {escape(outcome.name)}: [{_STYLES[outcome.status]}]{outcome.status}[/] "
        f"({escape(reason)}){verified}",
        markup=True,
    )
    upload = outcome.upload
    if upload is not None:
        text = upload.commit_url or upload.error or ""
        info(f"      upload to {escape(upload.repo_id)}: {upload.status} {escape(text)}", markup=True)


def register(app: typer.Typer) -> None:
    app.command("batch", cls=Command)(batch_command)
