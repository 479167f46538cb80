"""The manifest a conversion records in ``eaglequant_report.json``: what it was made from (the SHA-256 of
every source file) and with which options, reduced to one key. ``batch`` skips a job whose destination is
complete and carries the key the job would produce."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from eaglequant import __version__
from eaglequant.hub import SourceRef, blob_sha256

REPORT_NAME = "eaglequant_report.json"
SKIPPED_DIRS = {".git", ".cache", ".huggingface", ".eaglequant"}
HASH_CHUNK_BYTES = 8 * 1024 * 1024


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def source_files(root: Path) -> list[Path]:
    """Every regular file a conversion may read or carry over (bookkeeping directories left out)."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(root).parts)
    )


def source_digests(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 for every source file (Hub cache blobs named by their hash are not re-read)."""
    return {p.relative_to(root).as_posix(): blob_sha256(p) or file_sha256(p) for p in source_files(root)}


def conversion_manifest(source: SourceRef, options: dict[str, Any]) -> dict[str, Any]:
    """``options``: the conversion's settings, already normalised (resolved counts, sorted engines)."""
    files = source_digests(source.path)
    options = {**options, "eaglequant_version": __version__}
    key_material = json.dumps({"source_files": files, "options": options}, sort_keys=True)
    return {
        "key": hashlib.sha256(key_material.encode()).hexdigest(),
        "source": {**source.to_json(), "files": files},
        "options": options,
    }


def recorded_report(dst: Path) -> dict[str, Any] | None:
    """The report ``convert`` wrote into ``dst``, or None when there is none (or it cannot be read)."""
    try:
        value = json.loads((dst / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def completed_with(dst: Path, key: str) -> str | None:
    """Why ``dst`` cannot be reused for a conversion with manifest ``key``; None when it can: it carries
    that key and every file its report lists is there with the recorded SHA-256."""
    report = recorded_report(dst)
    if report is None:
        return "no report" if dst.exists() else "absent"
    if (report.get("manifest") or {}).get("key") != key:
        return "made from another source or with other options"
    files = report.get("files")
    if not isinstance(files, dict) or not files:
        return "report lists no files"
    problems = changed_files(dst, files)
    return problems[0] if problems else None


def changed_files(dst: Path, files: dict[str, str]) -> list[str]:
    """One line per file of ``files`` (name -> SHA-256, as the report lists them) missing or changed in ``dst``."""
    problems = []
    for name, digest in files.items():
        path = dst / name
        if not path.is_file():
            problems.append(f"{name}: listed in {REPORT_NAME} but missing")
        elif file_sha256(path) != digest:
            problems.append(f"{name}: SHA-256 differs from {REPORT_NAME} (the file changed after it was written)")
    return problems
