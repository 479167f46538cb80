"""``upload``'s notes, as findings: what a dry run or a forced upload says it did, without the Hub."""

from __future__ import annotations

import shutil
from pathlib import Path

from eaglequant import api
from eaglequant.common.findings import codes
from tests.conftest import FIXTURES


def test_a_forced_dry_run_notes_the_refusal_it_overrode_and_that_nothing_was_sent(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(FIXTURES / "specforge-llama", source)
    dst = api.convert(source, tmp_path / "out").destination
    shutil.rmtree(source)  # nothing to verify against: a real upload refuses it
    result = api.upload(dst, "org/draft-fp8", dry_run=True, force=True)
    assert result.forced and codes(result.notes) == ["forced", "dry-run"]
