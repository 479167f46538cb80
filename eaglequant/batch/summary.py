"""``batch`` summaries: the JSON one run writes, and the merge of those several runners wrote for one job file
(a CI matrix: one runner per job or per shard), with the same rule for success: every job ran and none failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError
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
class UploadOutcome:
    """What became of a job's upload."""

    status: UploadStatus
    repo_id: str
    commit_url: str | None = None
    error: str | None = None  # failed: what, in one line
    exit_code: int | None = None  # failed with an error of ours: its exit code

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "repo_id": self.repo_id}
        if self.status is not UploadStatus.FAILED:
            return {**data, "commit_url": self.commit_url}
        data["error"] = self.error
        return data if self.exit_code is None else {**data, "exit_code": self.exit_code}


def succeeded(status: str, upload_status: str | None) -> bool:
    """The one rule for a job's success: it ran without failing, and so did its upload, if it had one."""
    return status not in (JobStatus.FAILED, JobStatus.MISSING) and upload_status != UploadStatus.FAILED


_REQUIRED = {"jobs_file": str, "jobs_sha256": str, "job_names": list, "jobs": list}


def summary_json(
    *,
    jobs_file: str,
    jobs_sha256: str,
    job_names: list[str],
    jobs: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """A summary: the job file (its path and SHA-256), every job it holds, and the outcome of those that ran."""
    return {
        "jobs_file": jobs_file,
        "jobs_sha256": jobs_sha256,
        **extra,
        "job_names": job_names,
        "ok": all(succeeded(job.get("status", ""), (job.get("upload") or {}).get("status")) for job in jobs),
        "counts": _counts(jobs),
        "jobs": jobs,
    }


def _counts(jobs: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {JobStatus.CONVERTED: 0, JobStatus.SKIPPED: 0, JobStatus.FAILED: 0, "uploaded": 0}
    for job in jobs:
        counts[job["status"]] = counts.get(job["status"], 0) + 1
        counts["uploaded"] += (job.get("upload") or {}).get("status") == UploadStatus.UPLOADED
    return counts


def read_summary(path: Path) -> dict[str, Any]:
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
    return data


def merge_summaries(paths: list[Path]) -> dict[str, Any]:
    """One summary for the job file the runners shared: its jobs in the file's order, each from the summary
    that ran it; a job no summary reports is ``missing`` (its runner failed before writing one)."""
    if not paths:
        raise InputError("no summaries to merge", hint="pass the files `eaglequant batch --summary` wrote")
    summaries = [(path, read_summary(path)) for path in paths]
    first_path, first = summaries[0]
    ran: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path, summary in summaries:
        if summary["jobs_sha256"] != first["jobs_sha256"]:
            raise InputError(
                f"{path}: a summary of another job file than {first_path} (or of another version of it)",
                hint="merge only the summaries of one run",
            )
        for job in summary["jobs"]:
            if job["name"] in ran:
                raise InputError(
                    f"job {job['name']!r} is in two summaries: {ran[job['name']][0]} and {path}",
                    hint="merge each runner's summary once; shards and --only jobs do not overlap",
                )
            ran[job["name"]] = (path, job)
    names = [str(name) for name in first["job_names"]]
    jobs = [ran[name][1] if name in ran else _missing(name) for name in names]
    merged = summary_json(
        jobs_file=first["jobs_file"],
        jobs_sha256=first["jobs_sha256"],
        job_names=names,
        jobs=jobs,
        summaries=[str(path) for path in paths],
    )
    merged["counts"]["missing"] = sum(job["status"] == JobStatus.MISSING for job in jobs)
    return merged


def _missing(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "status": JobStatus.MISSING,
        "reason": "no summary reports this job (did its runner fail before writing one?)",
        "exit_code": None,
        "verified": None,
        "upload": None,
    }
