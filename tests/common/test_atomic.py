"""A file is replaced whole or not at all, by one helper: every other module writes through it (the destination
commit aside, which moves a whole output directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eaglequant.common.atomic import replaced_whole, write_text_whole
from tests.conftest import ROOT

# The helper itself, and the destination commit (checkpoint/destination.py), which keeps the directory it replaces
# until the new one is in place.
RENAMING = {"common/atomic.py", "checkpoint/destination.py"}


def test_the_new_text_replaces_the_old(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text("old", encoding="utf-8")
    write_text_whole(path, "new")
    assert path.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), replaced_whole(path) as partial:
        partial.write_text("half", encoding="utf-8")
        raise RuntimeError("interrupted")
    assert path.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_directory_appears_whole(tmp_path: Path) -> None:
    target = tmp_path / "head"
    with replaced_whole(target) as partial:
        partial.mkdir()
        (partial / "config.json").write_text("{}", encoding="utf-8")
        assert not target.exists()
    assert (target / "config.json").is_file() and not (tmp_path / ".head.partial").exists()


def test_nothing_else_renames_or_replaces_files() -> None:
    package = ROOT / "eaglequant"
    pattern = re.compile(r"os\.replace\(|os\.rename\(|\.rename\(|\bpartial\.replace\(")
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in package.rglob("*.py")
        if path.relative_to(package).as_posix() not in RENAMING
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
