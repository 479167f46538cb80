"""Uploading a quantized head: the verification that vouches for it, the rule that refuses it, the card
renamed for its repo, then the Hub client's ``upload_folder``.

This sits above :mod:`eaglequant.hub.client` (which knows nothing of verification) and
:mod:`eaglequant.verification.verify`; ``api.upload`` (and through it the CLI and ``batch``) calls
:func:`upload_checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.common.errors import EXIT_CHECK_FAILED, EagleQuantError, InputError, Words, placeholder, switch, words
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.hub.client import check_repo_id, upload_files, upload_folder
from eaglequant.record.verification import Verdict

if TYPE_CHECKING:
    from eaglequant.verification.verify import VerifyReport


class UploadRefused(EagleQuantError):
    """DST fails ``verify`` or was never verified numerically; uploading it would publish what no check
    vouches for. Exit code 3."""

    exit_code = EXIT_CHECK_FAILED


@dataclass
class UploadResult(JsonRecord):
    """What ``upload`` sent (or, dry, would send) and the verdict of the verification it went by."""

    json_computed = ("total_bytes",)
    json_renamed = named(verdict="verified")
    json_first = ("destination", "repo_id", "revision", "private", "dry_run", "files", "total_bytes", "verdict")

    destination: Path
    repo_id: str
    revision: str
    private: bool
    files: dict[str, int]  # path in repo -> bytes
    dry_run: bool
    verdict: Verdict | None = None  # the verification's the upload went by (None: sent without one)
    forced: bool = False
    commit_url: str | None = None
    commit_oid: str | None = None
    notes: list[Finding] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())


def upload_checkpoint(
    dst: str | Path,
    repo_id: str,
    verify: Callable[[Path], VerifyReport],
    *,
    revision: str = "main",
    private: bool = False,
    commit_message: str | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> UploadResult:
    """What ``api.upload`` documents; ``verify(dst)`` is its verification of ``dst`` (against the source it
    was given, or the one recorded)."""
    from eaglequant.publish.card import renamed_draft

    check_repo_id(repo_id)
    dst_path = Path(dst)
    if not dst_path.is_dir():
        raise InputError(f"{dst_path}: not a directory", hint="DST is what `eaglequant convert` wrote")
    files = upload_files(dst_path)
    verification = verify(dst_path)
    result = UploadResult(dst_path, repo_id, revision, private, files, dry_run, verification.verdict)
    refusal = upload_refusal(verification)
    if refusal is not None:
        if not force:
            dry = " (dry run: nothing sent; a real upload refuses it too)" if dry_run else ""
            raise UploadRefused(f"{dst_path}: {refusal}{dry}", hint=_upload_hint(verification.verdict))
        result.forced = True
        forced = f"{refusal}; {'a real upload would send' if dry_run else 'sent'} it anyway (force=True)"
        result.notes.append(Finding("forced", "", forced))
    elif verification.verdict is Verdict.NOT_VERIFIED:
        vouched = (
            "parity and fidelity passed at conversion (eaglequant_verify.json), and every file still has the "
            "SHA-256 the report records"
        )
        result.notes.append(Finding("verified-at-conversion", "", vouched))
    if dry_run:
        result.notes.append(Finding("dry-run", "", f"dry run: nothing sent; README.md would name the draft {repo_id}"))
        return result
    with renamed_draft(dst_path, repo_id) as renamed:  # put back as it was if the upload fails
        if renamed:
            result.notes.append(Finding("card-renamed", "README.md", f"README.md now names the draft {repo_id}"))
            result.files = upload_files(dst_path)
        push(result, commit_message)
    return result


UPLOAD_HINTS = {
    Verdict.FAILED: words(
        "run `eaglequant verify` on it and fix the conversion, or pass ", switch("force"), " to upload anyway"
    ),
    Verdict.INCONCLUSIVE: words(
        "verify it with more captured prompts (",
        placeholder("inputs", "FILE"),
        "), or pass ",
        switch("force"),
        " to upload anyway",
    ),
    Verdict.NOT_VERIFIED: words(
        "pass ",
        placeholder("source", "SRC"),
        " (the checkpoint it was made from), or convert it with ",
        switch("verify_output"),
        "; ",
        switch("force"),
        " uploads it anyway",
    ),
}


def _upload_hint(verdict: Verdict) -> Words:
    """What to do about a refused upload; a passing verify refused only for the conversion's inconclusive one."""
    return UPLOAD_HINTS.get(verdict, UPLOAD_HINTS[Verdict.INCONCLUSIVE])


def upload_refusal(report: VerifyReport) -> str | None:
    """Why ``upload`` refuses a checkpoint with this verification (None: it may go)."""
    from eaglequant.verification.verdict import recorded_verdict

    if report.verdict is Verdict.FAILED:
        problems = report.problems
        return f"fails verify ({problems[0]}{f'; {len(problems) - 1} more' if len(problems) > 1 else ''})"
    if report.verdict is Verdict.INCONCLUSIVE:
        return f"its predicted acceptance is inconclusive ({report.unsettled[0]})"
    if report.acceptance is None and recorded_verdict(report.destination) is Verdict.INCONCLUSIVE:
        return "its conversion's predicted acceptance was inconclusive (convert --verify), and none was predicted now"
    if report.verdict is Verdict.NOT_VERIFIED:
        recorded = recorded_verdict(report.destination)
        if recorded is Verdict.PASSED:
            return None
        recorded_as = {
            Verdict.FAILED: "recorded a failure",
            Verdict.INCONCLUSIVE: "recorded an inconclusive acceptance",
        }
        what = recorded_as.get(recorded, "recorded none") if recorded is not None else "recorded none"
        return f"not verified numerically: no source to check it against, and its conversion {what}"
    return None


def push(result: UploadResult, commit_message: str | None) -> None:
    """Send ``result.destination`` to its repo (created if needed) and fill in the commit."""
    message = commit_message or f"Upload quantized EAGLE-3 draft head ({len(result.files)} files) with eaglequant"
    result.commit_url, result.commit_oid = upload_folder(
        result.destination, result.repo_id, revision=result.revision, private=result.private, message=message
    )
