"""The Hub as ``batch``'s record of what is done: a job with ``[job.upload]`` is done when its repo, at its
revision, holds an eaglequant report with the job's manifest key, every file that report lists with its
SHA-256, and no failed verification. Weights are never downloaded for this: their SHA-256 is in the Hub's file
listing (LFS); only the report and the other small files it lists (config, card, verification) are fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglequant.common.findings import Finding
from eaglequant.hub.client import RepoListing, repo_listing
from eaglequant.record.manifest import reuse_problem
from eaglequant.record.report import REPORT_NAME, report_if_readable
from eaglequant.record.verification import VERIFY_NAME, Verdict

OFFLINE_NOTE = Finding(
    "hub-offline", "", "HF_HUB_OFFLINE is set: jobs with [job.upload] are judged done from their local destination"
)


@dataclass(frozen=True)
class HubRecord:
    repo_id: str
    revision: str
    commit: str | None  # the revision's head commit; None when the repo or revision does not exist
    why_not: str | None  # why the job is not done on the Hub; None when it is
    verified: bool | None = None  # the recorded verification: passed, failed, or none recorded

    @property
    def done(self) -> bool:
        return self.why_not is None

    @property
    def target(self) -> str:
        return f"{self.repo_id}@{self.revision}"

    @property
    def commit_url(self) -> str | None:
        from huggingface_hub import constants

        return None if self.commit is None else f"{constants.ENDPOINT}/{self.repo_id}/commit/{self.commit}"


def hub_record(repo_id: str, revision: str, key: str) -> HubRecord:
    """Whether ``repo_id@revision`` holds the output of a conversion with manifest ``key``, intact."""
    listing = repo_listing(repo_id, revision)
    if listing is None:
        return HubRecord(repo_id, revision, None, "not on the Hub yet")
    if REPORT_NAME not in listing.lfs_sha256:
        return HubRecord(repo_id, revision, listing.commit, f"the Hub repo has no {REPORT_NAME}")
    snapshot = listing.fetch(REPORT_NAME).parent  # the commit's snapshot in the Hugging Face cache
    report = report_if_readable(snapshot)
    if report is None:
        return HubRecord(repo_id, revision, listing.commit, f"the Hub's {REPORT_NAME} cannot be read")
    why_not = reuse_problem(report, key, lambda files: _changed_on_hub(listing, files))
    verified = _verified_on_hub(listing, snapshot) if why_not is None else None
    if verified is False:
        why_not = "its recorded verification failed"  # a failure is retried, never taken as done
    return HubRecord(repo_id, revision, listing.commit, why_not, verified)


def _changed_on_hub(listing: RepoListing, files: dict[str, str]) -> list[Finding]:
    """The first file of ``files`` missing on the Hub or with another SHA-256 (LFS files first: they cost
    nothing to check, the others are downloaded)."""
    for name in sorted(files, key=lambda n: listing.lfs_sha256.get(n) is None):
        if name not in listing.lfs_sha256:
            return [Finding("listed-but-missing", name, f"{name}: listed in {REPORT_NAME} but missing on the Hub")]
        if listing.sha256(name) != files[name]:
            return [Finding("sha256-differs", name, f"{name}: its SHA-256 on the Hub differs from {REPORT_NAME}")]
    return []


def _verified_on_hub(listing: RepoListing, snapshot: Path) -> bool | None:
    if VERIFY_NAME not in listing.lfs_sha256:
        return None
    listing.fetch(VERIFY_NAME)
    return recorded_verified(snapshot)


def recorded_verified(directory: Path) -> bool | None:
    """The verification recorded with an output: no check failed (True: passed, inconclusive, or not verified
    numerically, as a conversion's own verification counts it), a check failed (False), none recorded (None).
    Converting again gives an inconclusive or unnumbered verdict again, so only a failure is retried."""
    from eaglequant.verification.verdict import recorded_verdict

    verdict = recorded_verdict(directory)
    return None if verdict is None else verdict is not Verdict.FAILED
