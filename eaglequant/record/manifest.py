"""The manifest a conversion records in ``eaglequant_report.json``: what it was made from (the SHA-256 of
every source file) and with which options, reduced to one key. ``batch`` skips a job whose destination is
complete and carries the key the job would produce."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.hashing import cached_file_sha256, file_sha256
from eaglequant.checkpoint.reader import source_files
from eaglequant.common.background import in_background
from eaglequant.common.findings import Finding
from eaglequant.common.version import __version__
from eaglequant.hub.client import SourceRef, blob_sha256
from eaglequant.record.report import REPORT_NAME, ConversionReport, ManifestRecord, RecordedSource, report_if_readable


def source_digests(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 for every source file (Hub cache blobs are named by their hash, and files
    hashed before and unchanged since are found in the cache: neither is read again)."""
    return {p.relative_to(root).as_posix(): blob_sha256(p) or cached_file_sha256(p) for p in source_files(root)}


def background_digests(root: Path) -> Future[dict[str, str]]:
    """:func:`source_digests` computed in a daemon thread, so hashing the source overlaps converting it."""
    return in_background(source_digests, root, name="sha256 source")


def conversion_manifest(
    source: SourceRef, options: dict[str, Any], files: dict[str, str] | None = None
) -> ManifestRecord:
    """``options``: the conversion's settings, already normalised (resolved counts, sorted engines);
    ``files``: the source's :func:`source_digests` when already computed."""
    files = source_digests(source.path) if files is None else files
    options = {**options, "eaglequant_version": __version__}
    recorded = RecordedSource(str(source.path), source.repo_id, source.revision, source.commit, files)
    return ManifestRecord(_key(files, options), recorded, options)


def manifest_key_of(files: dict[str, str], options: dict[str, Any]) -> str:
    """The key :func:`conversion_manifest` gives for source ``files`` (path -> SHA-256) and ``options``."""
    return _key(files, {**options, "eaglequant_version": __version__})


def _key(files: dict[str, str], options: dict[str, Any]) -> str:
    key_material = json.dumps({"source_files": files, "options": options}, sort_keys=True)
    return hashlib.sha256(key_material.encode()).hexdigest()


def completed_with(dst: Path, key: str) -> str | None:
    """Why ``dst`` cannot be reused for a conversion with manifest ``key``; None when it can: it carries
    that key and every file its report lists is there with the recorded SHA-256."""
    report = report_if_readable(dst)
    if report is None:
        return "no report" if dst.exists() else "absent"
    return reuse_problem(report, key, lambda files: changed_files(dst, files))


def reuse_problem(
    report: ConversionReport, key: str, changed: Callable[[dict[str, str]], Sequence[Finding]]
) -> str | None:
    """Why the output ``report`` describes cannot stand for a conversion with manifest ``key`` (None when it
    can); ``changed``: the files of a name -> SHA-256 map that are missing or differ where the output is."""
    if report.manifest is None or report.manifest.key != key:
        return "made from another source or with other options"
    if not report.files:
        return "report lists no files"
    problems = changed(report.files)
    return problems[0].message if problems else None


def changed_files(dst: Path, files: dict[str, str]) -> list[Finding]:
    """One finding per file of ``files`` (name -> SHA-256, as the report lists them) missing (``listed-but-missing``)
    or changed (``sha256-differs``) in ``dst``, about that file."""
    problems: list[Finding] = []
    for name, digest in files.items():
        path = dst / name
        if not path.is_file():
            problems.append(Finding("listed-but-missing", name, f"{name}: listed in {REPORT_NAME} but missing"))
        elif file_sha256(path) != digest:
            why = f"{name}: SHA-256 differs from {REPORT_NAME} (the file changed after it was written)"
            problems.append(Finding("sha256-differs", name, why))
    return problems
