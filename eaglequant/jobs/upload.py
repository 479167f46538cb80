"""The upload job: DST verified (against ``source``, or the source its records name) before it is sent."""

from __future__ import annotations

from pathlib import Path

from eaglequant.publish.upload import UploadResult, upload_checkpoint
from eaglequant.verification.written import verify_recorded


def upload_verified(
    dst: str | Path,
    repo_id: str,
    *,
    revision: str = "main",
    private: bool = False,
    commit_message: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    source: str | Path | None = None,
) -> UploadResult:
    """:func:`eaglequant.api.upload`: :func:`~eaglequant.publish.upload.upload_checkpoint` with DST's verification
    against ``source`` (default: the one recorded, when still on disk)."""
    return upload_checkpoint(
        dst,
        repo_id,
        lambda path: verify_recorded(path, source=source),
        revision=revision,
        private=private,
        commit_message=commit_message,
        dry_run=dry_run,
        force=force,
    )
