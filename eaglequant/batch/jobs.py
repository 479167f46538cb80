"""``batch``: run the conversions (and uploads) a TOML job file lists, as a CI step.

A job is skipped when its destination is complete and its manifest carries the key this job would
produce (same source bytes, same options, same eaglequant); a failed job is recorded and the others go
on. Paths in the job file are relative to the file. See ``docs/ci.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.batch.checks import check_name, check_repo_id, conversion_options
from eaglequant.batch.record import OFFLINE_NOTE, HubRecord, hub_record, recorded_verified
from eaglequant.batch.summary import JobStatus, UploadOutcome, UploadStatus, job_counts, succeeded
from eaglequant.batch.uploads import Upload, read_uploads, record_upload
from eaglequant.checkpoint.hashing import file_sha256
from eaglequant.common import toml
from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INTERNAL, EagleQuantError, InputError, OutputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, JsonRecord, named
from eaglequant.conversion.options import OPTION_SPECS, ConversionOptions
from eaglequant.hub.client import HUB_PREFIX, parse_repo_ref

# The job file's keys for ConversionOptions fields, with their TOML types, as the options declare them:
# ``verify`` is ``verify_output`` (true unless set), the card's ``repo_id`` is [job.upload]'s, and ``workers``
# and ``device`` belong to the runner.
_OPTION_OF_KEY = {spec.job_key: name for name, spec in OPTION_SPECS.items() if spec.job_type is not None}
_CONVERT_KEYS = {spec.job_key: spec.job_type for spec in OPTION_SPECS.values() if spec.job_type is not None}
_JOB_KEYS = {"name": str, "source": str, "destination": str, "overwrite": bool, "upload": dict, **_CONVERT_KEYS}
_UPLOAD_KEYS = {"repo_id": str, "revision": str, "private": bool, "commit_message": str}
_PATH_KEYS = ("target_config", "calib")
_TYPE_WORDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list of strings", dict: "a table"}


@dataclass(frozen=True)
class UploadSpec:
    repo_id: str
    revision: str = "main"
    private: bool = False
    commit_message: str | None = None


@dataclass(frozen=True)
class Job:
    name: str
    source: str  # a resolved local path, or a Hub repo id
    destination: Path
    options: ConversionOptions
    overwrite: bool = False
    upload: UploadSpec | None = None


@dataclass
class JobOutcome(JsonRecord):
    """What became of a job (:meth:`of`): its name, source and destination, then what became of it."""

    name: str
    source: str  # a resolved local path, or a Hub repo id
    destination: Path
    status: JobStatus = JobStatus.PENDING
    reason: str = ""  # why it was skipped, or what failed
    exit_code: int = 0
    seconds: float = 0.0  # to the millisecond, as written
    verified: bool | None = None
    manifest_key: str | None = None
    upload: UploadOutcome | None = None

    @classmethod
    def of(cls, job: Job) -> JobOutcome:
        """A job not yet run."""
        return cls(job.name, job.source, job.destination)

    @property
    def upload_status(self) -> UploadStatus | None:
        return None if self.upload is None else self.upload.status

    @property
    def succeeded(self) -> bool:
        return succeeded(self.status, self.upload_status)


def _shard_text(shard: tuple[int, int] | None) -> str | None:
    return None if shard is None else f"{shard[0]}/{shard[1]}"


def _read_shard(obj: JsonObject, key: str) -> tuple[int, int] | None:
    """:func:`_shard_text`'s ``I/N`` read back (none: every job)."""
    text = obj.optional_text(key) if key in obj.data else None
    if text is None:
        return None
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()):
        raise obj.wrong(key, "a shard I/N")
    return int(index), int(count)


@dataclass
class BatchResult(JsonRecord):
    """A run's summary: the job file (its path and SHA-256), every job it holds, and the outcome of those that ran
    (``batch-merge`` reads it, :class:`~eaglequant.batch.summary.MergedSummary` writes the merge alike)."""

    json_computed = ("eaglequant_version", "ok", "counts")
    json_renamed = named(outcomes="jobs")
    json_values = named(shard=_shard_text)
    json_read = named(shard=_read_shard)
    json_first = ("jobs_file", "jobs_sha256", "eaglequant_version", "shard", "notes", "job_names", "ok", "counts")

    jobs_file: Path
    jobs_sha256: str = ""  # the job file's bytes: summaries of one file merge, those of different files do not
    job_names: list[str] = field(default_factory=list)  # every job of the file, run here or not
    shard: tuple[int, int] | None = None
    outcomes: list[JobOutcome] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(outcome.succeeded for outcome in self.outcomes)

    @property
    def counts(self) -> dict[str, int]:
        """How many jobs were converted, skipped, failed, and how many uploaded."""
        return job_counts(self.outcomes)

    @property
    def eaglequant_version(self) -> str:
        from eaglequant.common.version import __version__

        return __version__


def load_jobs(path: Path) -> list[Job]:
    """Parse and check the whole job file before anything runs (exit 2 on any mistake)."""
    try:
        data = toml.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: job file not found") from exc
    except (OSError, UnicodeDecodeError, toml.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a readable TOML job file ({exc})") from exc
    unknown = set(data) - {"defaults", "job"}
    if unknown:
        raise InputError(f"{path}: unknown table {sorted(unknown)[0]!r}", hint="expected [defaults] and [[job]]")
    defaults = _checked(path, "[defaults]", data.get("defaults", {}), set(_JOB_KEYS) - {"name", "source"})
    entries = data.get("job")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: no [[job]] entries")
    jobs = [
        _job(path, index, {**defaults, **_checked(path, f"job {index + 1}", entry, set(_JOB_KEYS))})
        for index, entry in enumerate(entries)
    ]
    _refuse_clashes(path, jobs)
    return jobs


def _checked(path: Path, where: str, table: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InputError(f"{path}: {where} must be a table")
    for key, value in table.items():
        if key not in allowed:
            raise InputError(f"{path}: {where}: unknown key {key!r}", hint=f"known keys: {', '.join(sorted(allowed))}")
        expected = _JOB_KEYS[key]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InputError(f"{path}: {where}: {key} must be {_TYPE_WORDS[expected]}, not {value!r}")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise InputError(f"{path}: {where}: {key} must be a list of strings")
    return table


def _job(path: Path, index: int, entry: dict[str, Any]) -> Job:
    for key in ("source", "destination"):
        if key not in entry:
            raise InputError(f"{path}: job {index + 1}: {key} is missing")
    base = path.parent
    destination = base / entry["destination"]
    name = entry.get("name") or destination.name
    where = f"{path}: job {name!r}"
    check_name(where, name)
    settings = {_OPTION_OF_KEY[key]: entry[key] for key in _CONVERT_KEYS if key in entry}
    for key in _PATH_KEYS:
        if key in settings:
            settings[key] = str(base / settings[key])
    if settings.get("scheme", "").endswith(".toml"):  # a scheme file, relative to the job file
        settings["scheme"] = str(base / settings["scheme"])
    settings.setdefault("verify_output", True)
    upload = _upload_spec(where, entry["upload"]) if "upload" in entry else None
    if upload is not None:
        settings["repo_id"] = upload.repo_id
    options = conversion_options(where, settings)
    return Job(name, _source(base, entry["source"]), destination, options, entry.get("overwrite", False), upload)


def _source(base: Path, source: str) -> str:
    """A path relative to the job file when it exists there, or when its parent does (a mistyped path, refused as
    one); otherwise a Hub repo id if it is one. ``hf://org/name`` is always the Hub's."""
    local = base / source
    if source.startswith(HUB_PREFIX):
        return source
    if local.exists() or local.parent.is_dir() or parse_repo_ref(source) is None:
        return str(local)
    return source


def _upload_spec(where: str, table: dict[str, Any]) -> UploadSpec:
    where = f"{where}: [job.upload]"
    for key, value in table.items():
        expected = _UPLOAD_KEYS.get(key)
        if expected is None:
            raise InputError(f"{where}: unknown key {key!r}", hint=f"known keys: {', '.join(_UPLOAD_KEYS)}")
        if not isinstance(value, expected):
            raise InputError(f"{where}: {key} must be {_TYPE_WORDS[expected]}, not {value!r}")
    if "repo_id" not in table:
        raise InputError(f"{where}: repo_id is missing", hint='add repo_id = "org/name"')
    check_repo_id(where, table["repo_id"])
    return UploadSpec(**table)


def _refuse_clashes(path: Path, jobs: list[Job]) -> None:
    """One destination per job (checked first: a name defaults to its destination's), one name per job."""
    by_destination: dict[Path, int] = {}
    by_name: dict[str, int] = {}
    for number, job in enumerate(jobs, 1):
        first = by_destination.setdefault(job.destination.resolve(), number)
        if first != number:
            raise InputError(
                f"{path}: job {first} ({jobs[first - 1].name!r}) and job {number} ({job.name!r}) both write to "
                f"{job.destination}",
                hint="give each job its own destination",
            )
        first = by_name.setdefault(job.name, number)
        if first != number:
            raise InputError(
                f"{path}: job {first} and job {number} are both named {job.name!r}",
                hint='set a different name = "..." in one of them (names select jobs for --only and CI matrices)',
            )


def select_jobs(
    jobs_file: Path, jobs: list[Job], only: Sequence[str] = (), shard: tuple[int, int] | None = None
) -> list[Job]:
    """The jobs named in ``only``, or shard K of N (``shard=(K, N)``: the jobs at positions K, K+N, K+2N, ...
    of the file, counting from 1, so N runners share the jobs evenly and a rerun gives each the same ones as
    long as jobs are added at the end), or all of them."""
    if only and shard is not None:
        raise InputError("only and shard both select jobs", hint="pass one of them")
    if only:
        missing = [name for name in only if name not in {job.name for job in jobs}]
        if missing:
            raise InputError(f"{jobs_file}: no job named {missing[0]!r}", hint=f"jobs: {_names(jobs)}")
        return [job for job in jobs if job.name in only]
    if shard is not None:
        k, n = shard
        if not 1 <= k <= n:
            raise InputError(f"shard=({k}, {n}): K must be between 1 and N")
        return jobs[k - 1 :: n]
    return jobs


def _names(jobs: list[Job]) -> str:
    names = ", ".join(job.name for job in jobs[:8])
    return names + (f" and {len(jobs) - 8} more" if len(jobs) > 8 else "")


def run_batch(
    path: str | Path,
    *,
    only: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
    on_job: Callable[[int, int, JobOutcome], None] | None = None,
    on_note: Callable[[Finding], None] | None = None,
) -> BatchResult:
    """Run the jobs of ``path`` that :func:`select_jobs` picks, in order; ``on_job`` hears of each one done,
    ``on_note`` of what the summary's ``notes`` say. The whole file is checked first."""
    from eaglequant.hub.client import hub_offline

    jobs_file = Path(path)
    jobs = load_jobs(jobs_file)
    selected = select_jobs(jobs_file, jobs, only, shard)
    result = BatchResult(jobs_file, file_sha256(jobs_file), [job.name for job in jobs], shard)
    use_hub = not hub_offline()
    if not use_hub and any(job.upload is not None for job in selected):
        result.notes.append(OFFLINE_NOTE)
    for note in result.notes:
        if on_note is not None:
            on_note(note)
    for number, job in enumerate(selected, 1):
        outcome = run_job(job, use_hub=use_hub)
        result.outcomes.append(outcome)
        if on_job is not None:
            on_job(number, len(selected), outcome)
    return result


def run_job(job: Job, *, use_hub: bool = True) -> JobOutcome:
    """Convert (and upload) ``job`` unless it is done: on the Hub when it has ``[job.upload]`` and ``use_hub``,
    else (or when the Hub lacks it) in its destination."""
    from eaglequant.conversion.manifest_options import manifest_key

    outcome = JobOutcome.of(job)
    started = time.perf_counter()
    record: HubRecord | None = None
    try:
        outcome.manifest_key = manifest_key(job.source, job.options)
        if job.upload is not None and use_hub:
            record = hub_record(job.upload.repo_id, job.upload.revision, outcome.manifest_key)
        if record is not None and record.done:
            reason = (
                f"on the Hub at {record.target} (commit {str(record.commit)[:12]}), from the same source and options"
            )
            outcome.status, outcome.reason, outcome.verified = JobStatus.SKIPPED, reason, record.verified
        else:
            _convert_unless_done(job, outcome, record)
    except EagleQuantError as exc:
        _fail(outcome, exc.one_line(), exc.exit_code)
    except OSError as exc:  # the disk or the network failed this job; the others still run
        _fail(outcome, _os_failure(exc), EXIT_INTERNAL)
    outcome.seconds = round(time.perf_counter() - started, 3)
    if record is not None and record.done:
        outcome.upload = UploadOutcome(UploadStatus.SKIPPED, record.repo_id, record.commit_url)
    elif job.upload is not None and outcome.status is not JobStatus.FAILED:
        outcome.upload = _upload(job, outcome.manifest_key or "", trust_local_record=record is None)
    return outcome


def _convert_unless_done(job: Job, outcome: JobOutcome, record: HubRecord | None) -> None:
    """The local rule: skip when the destination is complete, from the same source and options, and its
    recorded verification did not fail; else convert."""
    from eaglequant.jobs.conversion import write_conversion
    from eaglequant.record.manifest import completed_with
    from eaglequant.record.report import report_if_readable

    assert outcome.manifest_key is not None
    on_hub = "" if record is None else f" (on the Hub at {record.target}: {record.why_not})"
    why_not = completed_with(job.destination, outcome.manifest_key)
    if why_not is None and recorded_verified(job.destination) is False:
        why_not = "its recorded verification failed"  # a failure is retried, never skipped as done
    if why_not is None:
        outcome.status, outcome.reason = JobStatus.SKIPPED, f"complete, from the same source and options{on_hub}"
        outcome.verified = recorded_verified(job.destination)
        return
    # A destination eaglequant wrote is always replaced; anything else only with ``overwrite = true``.
    if job.destination.exists() and report_if_readable(job.destination) is None and not job.overwrite:
        raise OutputError(
            f"{job.destination}: already exists and was not written by eaglequant",
            hint=f"choose another destination, or set overwrite = true in job {job.name!r} to delete what it holds",
        )
    result = write_conversion(job.source, job.destination, job.options, overwrite=True, overwrite_any=job.overwrite)
    outcome.status, outcome.reason = JobStatus.CONVERTED, f"{why_not}{on_hub}"
    if result.verification is not None:
        outcome.verified = result.verification.ok
    if outcome.verified is False:
        problems = "; ".join(str(problem) for problem in result.verification.problems[:3])
        _fail(outcome, f"verify failed ({problems}); the output is kept at {result.destination}", EXIT_CHECK_FAILED)


def _os_failure(exc: OSError) -> str:
    """One line for a failed read, write or connection: what failed, on which file when it names one."""
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return f"{type(exc).__name__}{where}: {exc.strerror or exc}; fix it and rerun the batch (done jobs are skipped)"


def _fail(outcome: JobOutcome, reason: str, exit_code: int) -> None:
    outcome.status, outcome.reason, outcome.exit_code = JobStatus.FAILED, reason, exit_code


def _upload(job: Job, key: str, *, trust_local_record: bool) -> UploadOutcome:
    """Upload unless this destination, with this manifest key, already went to that repo and revision (as
    ``.eaglequant/uploads.json`` records, when ``trust_local_record``: the Hub was not asked)."""
    from eaglequant.jobs.upload import upload_verified

    assert job.upload is not None
    spec = job.upload
    target = f"{spec.repo_id}@{spec.revision}"
    previous = read_uploads(job.destination).get(target)
    if trust_local_record and previous is not None and previous.manifest_key == key:
        return UploadOutcome(UploadStatus.SKIPPED, spec.repo_id, previous.commit_url)
    try:
        result = upload_verified(
            job.destination,
            spec.repo_id,
            revision=spec.revision,
            private=spec.private,
            commit_message=spec.commit_message,
        )
    except EagleQuantError as exc:
        return UploadOutcome(UploadStatus.FAILED, spec.repo_id, error=exc.one_line(), exit_code=exc.exit_code)
    except OSError as exc:
        return UploadOutcome(UploadStatus.FAILED, spec.repo_id, error=_os_failure(exc))
    record_upload(job.destination, target, Upload(key, result.commit_url, result.commit_oid))
    return UploadOutcome(UploadStatus.UPLOADED, spec.repo_id, result.commit_url)
