"""record/manifest.py on its own: the key that says two conversions would write the same bytes, and whether a
destination still holds what its report lists."""

from __future__ import annotations

import hashlib
from pathlib import Path

from eaglequant.common.findings import codes
from eaglequant.hub.client import SourceRef
from eaglequant.record.manifest import (
    background_digests,
    changed_files,
    conversion_manifest,
    manifest_key_of,
    source_digests,
)


def _source(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}\n")
    (root / "sub" / "notes.txt").write_text("notes\n")
    return root


def test_digests_are_every_source_file_by_relative_path(tmp_path: Path) -> None:
    root = _source(tmp_path)
    expected = {
        "config.json": hashlib.sha256(b"{}\n").hexdigest(),
        "sub/notes.txt": hashlib.sha256(b"notes\n").hexdigest(),
    }
    assert source_digests(root) == expected
    assert background_digests(root).result(timeout=30) == expected


def test_the_key_changes_with_a_file_or_an_option_and_only_then(tmp_path: Path) -> None:
    root = _source(tmp_path)
    options = {"scheme": "fp8-per-channel", "engines": ["vllm"]}
    record = conversion_manifest(SourceRef(root), options)
    assert record.key == manifest_key_of(source_digests(root), options)
    assert record.key == conversion_manifest(SourceRef(root, repo_id="org/elsewhere"), options).key  # not where
    assert record.key != conversion_manifest(SourceRef(root), {**options, "engines": ["sglang"]}).key
    (root / "sub" / "notes.txt").write_text("other notes\n")
    assert record.key != conversion_manifest(SourceRef(root), options).key


def test_changed_files_names_what_is_missing_or_different(tmp_path: Path) -> None:
    root = _source(tmp_path)
    files = source_digests(root)
    assert changed_files(root, files) == []
    (root / "config.json").write_text("{ }\n")
    (root / "sub" / "notes.txt").unlink()
    problems = changed_files(root, files)
    assert codes(problems) == ["sha256-differs", "listed-but-missing"]
    assert [problem.subject for problem in problems] == ["config.json", "sub/notes.txt"]
