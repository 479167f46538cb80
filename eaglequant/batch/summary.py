"""``batch`` summaries: the JSON one run writes, and the merge of those several runners wrote for one job file
(a CI matrix: one runner per job or per shard), with the same rule for success: every job ran and none failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import NOT_WRITTEN, JsonRecord, named
from eaglequant.common.text_enum import TextEnum


class JobStatus(TextEnum):
    """What became of a job; the value is how summaries spell it."""

    PENDING = "pending"
    CONVERTED = "converted"
    SKIPPED = "skipped"  # done before, from the same source and options
    FAILED = "failed"
    MISSING = "missing"  # in a merge: no runner's summary reports it


class UploadStatus(TextEnum):
    UPLOADED = "uploaded"
    SKIPPED = "skipped"  # already there, from the same source and options
    FAILED = "failed"


@dataclass(frozen=True)
class UploadOutcome(JsonRecord):
    """What became of a job's upload: written with its commit, or where it failed with what failed (and its exit
    code, where an error of ours said one)."""

    json_values = named(commit_url="_unless_failed", error="_if_failed", exit_code="_if_failed_with")

    status: UploadStatus
    repo_id: str
    commit_url: str | None = None
    error: str | None = None  # failed: what, in one line
    exit_code: int | None = None  # failed with an error of ours: its exit code

    def _unless_failed(self, value: object) -> object:
        return NOT_WRITTEN if self.status is UploadStatus.FAILED else value

    def _if_failed(self, value: object) -> object:
        return value if self.status is UploadStatus.FAILED else NOT_WRITTEN

    def _if_failed_with(self, value: object) -> object:
        return NOT_WRITTEN if value is None else self._if_failed(value)


def succeeded(status: str, upload_status: str | None) -> bool:
    """The one rule for a job's success: it ran without failing, and so did its upload, if it had one."""
    return status not in (JobStatus.FAILED, JobStatus.MISSING) and upload_status != UploadStatus.FAILED


class CountedJob(Protocol):
    """A job as a summary counts it: a job this run ran, or one a runner's summary reports."""

    @property
    def status(self) -> str: ...

    @property
    def upload_status(self) -> str | None: ...


def job_counts(jobs: Sequence[CountedJob]) -> dict[str, int]:
    """How many jobs ended in each status, and (under ``uploaded``) how many uploaded."""
    uploaded = UploadStatus.UPLOADED
    counts: dict[str, int] = {JobStatus.CONVERTED: 0, JobStatus.SKIPPED: 0, JobStatus.FAILED: 0, uploaded: 0}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
        counts[uploaded] += job.upload_status == uploaded
    return counts


@dataclass(frozen=True)
class SummaryJob(JsonRecord):
    """One job as a runner's summary reports it (a :class:`~eaglequant.batch.jobs.JobOutcome`'s JSON), which the
    merged summary writes as it read it; or, in a merge, a job no summary reports (``missing``: written with its name,
    why, and no exit code, verification or upload, its source, destination, seconds and manifest key left out)."""

    json_values = named(
        source="_unless_missing",
        destination="_unless_missing",
        seconds="_unless_missing",
        manifest_key="_unless_missing",
    )
    json_first = (
        *("name", "source", "destination", "status", "reason", "exit_code", "seconds", "verified", "manifest_key"),
        "upload",
    )

    name: str
    status: JobStatus
    reason: str  # why it was skipped, or what failed
    exit_code: int | None
    verified: bool | None
    upload: UploadOutcome | None
    source: str | None = None
    destination: str | None = None
    seconds: float | None = None
    manifest_key: str | None = None

    def _unless_missing(self, value: object) -> object:
        return NOT_WRITTEN if self.status is JobStatus.MISSING else value

    @property
    def upload_status(self) -> UploadStatus | None:
        return None if self.upload is None else self.upload.status

    @property
    def succeeded(self) -> bool:
        return succeeded(self.status, self.upload_status)


@dataclass(frozen=True)
class RunSummary:
    """What a merge reads of the summary one runner wrote."""

    jobs_file: str
    jobs_sha256: str
    job_names: tuple[str, ...]
    jobs: tuple[SummaryJob, ...]


@dataclass(frozen=True)
class MergedSummary(JsonRecord):
    """The runners' summaries of one job file as one: its jobs in the file's order, each as the summary that ran it
    reports it; a job no summary reports is ``missing``."""

    json_computed = ("ok", "counts")
    json_first = ("jobs_file", "jobs_sha256", "summaries", "job_names", "ok", "counts")

    jobs_file: str
    jobs_sha256: str
    job_names: tuple[str, ...]
    jobs: tuple[SummaryJob, ...]
    summaries: tuple[str, ...]  # the files merged

    @property
    def ok(self) -> bool:
        return all(job.succeeded for job in self.jobs)

    @property
    def counts(self) -> dict[str, int]:
        counts = job_counts(self.jobs)
        counts["missing"] = sum(job.status == JobStatus.MISSING for job in self.jobs)
        return counts


_REQUIRED = {"jobs_file": str, "jobs_sha256": str, "job_names": list, "jobs": list}


def read_summary(path: Path) -> RunSummary:
    """A summary ``batch`` wrote, checked for the fields a merge needs (exit 2 when it is not one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: summary not found") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON summary ({exc})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a batch summary (not a JSON object)")
    for key, kind in _REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise InputError(
                f"{path}: not a batch summary of this eaglequant (no {key!r})",
                hint="merge the files `eaglequant batch --summary` wrote, with the same eaglequant version",
            )
    if not all(isinstance(job, dict) and isinstance(job.get("name"), str) for job in data["jobs"]):
        raise InputError(f"{path}: not a batch summary (a job without a name)")
    hint = "merge the files `eaglequant batch --summary` wrote, with the same eaglequant version"
    return RunSummary(
        data["jobs_file"],
        data["jobs_sha256"],
        tuple(str(name) for name in data["job_names"]),
        tuple(SummaryJob.from_json(job, str(path), InputError, hint) for job in data["jobs"]),
    )


def merge_summaries(paths: list[Path]) -> MergedSummary:
    """One summary for the job file the runners shared (see :class:`MergedSummary`)."""
    if not paths:
        raise InputError("no summaries to merge", hint="pass the files `eaglequant batch --summary` wrote")
    summaries = [(path, read_summary(path)) for path in paths]
    first_path, first = summaries[0]
    ran: dict[str, tuple[Path, SummaryJob]] = {}
    for path, summary in summaries:
        if summary.jobs_sha256 != first.jobs_sha256:
            raise InputError(
                f"{path}: a summary of another job file than {first_path} (or of another version of it)",
                hint="merge only the summaries of one run",
            )
        for job in summary.jobs:
            if job.name in ran:
                raise InputError(
                    f"job {job.name!r} is in two summaries: {ran[job.name][0]} and {path}",
                    hint="merge each runner's summary once; shards and --only jobs do not overlap",
                )
            ran[job.name] = (path, job)
    jobs = tuple(ran[name][1] if name in ran else _missing(name) for name in first.job_names)
    return MergedSummary(first.jobs_file, first.jobs_sha256, first.job_names, jobs, tuple(str(p) for p in paths))


def _missing(name: str) -> SummaryJob:
    why = "no summary reports this job (did its runner fail before writing one?)"
    return SummaryJob(name, JobStatus.MISSING, why, None, None, None)
