"""Running the command line as a user does (a fresh interpreter, the environment as given, exit codes and streams
as they come), and a converted checkpoint whose report records a copy of its source."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, CliResult, run_cli_subprocess


def as_user(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, code: str = "") -> CliResult:
    """``python -m eaglequant ARGS`` (after ``code``, run first in the same process), as a user runs it."""
    run = f"{code}\nimport sys\nfrom eaglequant.cli import main\nmain(sys.argv[1:])\n"
    proc = subprocess.run(
        [sys.executable, "-c", run, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def converted_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A conversion of a copy of the smallest fixture, whose report records that copy as its source."""
    import shutil

    work = tmp_path_factory.mktemp("converted")
    shutil.copytree(FIXTURES / "specforge-llama", work / "src")
    proc = run_cli_subprocess("convert", work / "src", work / "dst")
    assert proc.returncode == 0, proc.stderr
    return work / "dst"
