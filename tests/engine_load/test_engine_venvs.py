"""``verify --load-with`` finds the engine venvs ``scripts/setup.sh --test`` makes, and names where it looked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.as_user import as_user, converted_copy
from tests.conftest import ROOT
from tests.project.test_bad_input import assert_refused


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_copy(tmp_path_factory)


# -- --load-with finds the engine venvs scripts/setup.sh --test makes ------------------------------------


def test_load_with_uses_the_engine_venv_in_the_working_directory(converted: Path, tmp_path: Path) -> None:
    """No --engine-python, no EAGLEQUANT_SGLANG_PYTHON, SGLang not importable here: ``./.venv-sglang`` is used (a
    stand-in interpreter that only says who it is)."""
    fake = tmp_path / ".venv-sglang" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'the stand-in sglang python ran' >&2\nexit 3\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("EAGLEQUANT_SGLANG_PYTHON", None)
    proc = subprocess.run(
        [sys.executable, "-m", "eaglequant", "verify", str(converted), "--load-with", "sglang", "--tokens", "16"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert "the stand-in sglang python ran" in proc.stderr and str(fake) in proc.stderr, proc.stderr
    assert "not installed" not in proc.stderr


def test_load_with_names_where_it_looked(converted: Path, tmp_path: Path) -> None:
    """Nowhere to be found: the line names the venvs looked for (here, and beside this interpreter's venv, moved to
    ``env/.venv`` so that the project's own ``.venv-sglang`` is not found) and the setup that makes them."""
    code = f"import sys; sys.prefix = {str(tmp_path / 'env' / '.venv')!r}"
    result = as_user(
        "verify", converted, "--load-with", "sglang", env={"EAGLEQUANT_SGLANG_PYTHON": ""}, cwd=tmp_path, code=code
    )
    line = assert_refused(result, ("SGLang is not installed", "--engine-python", "scripts/setup.sh --test"))
    assert str(tmp_path / ".venv-sglang") in line and str(tmp_path / "env" / ".venv-sglang") in line
