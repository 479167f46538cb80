"""README command (a) shows what the README says it shows, and the fast subset it documents is selectable."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.as_user import as_user
from tests.conftest import FIXTURES, ROOT

# -- README command (a) shows what the README says it shows ------------------------------------------------


@pytest.mark.slow
def test_readme_command_a_shows_vllm_and_sglang_as_its_words_say(tmp_path: Path) -> None:
    from tests.project.test_readme import _readme_commands

    words = " ".join((ROOT / "README.md").read_text().split("## What it does", 1)[0].split())
    assert (
        "`explain --engine all` then reads the written checkpoint back as each engine will: for vLLM and SGLang"
        in words
    )
    assert "TensorRT-LLM (1.2.x and main) is listed as not loading it" in words
    (tmp_path / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    steps = [step.strip() for step in _readme_commands()[0].split("&&")]
    assert steps[0] == "bash scripts/setup.sh"
    shown = None
    for step in steps[1:]:
        args = shlex.split(step)
        assert args[0] == ".venv/bin/eaglequant", step
        shown = as_user(*args[1:], cwd=tmp_path, env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (step, shown.stderr)
    assert shown is not None and shlex.split(steps[-1])[1] == "explain"
    for title in ("vLLM 0.32.0", "SGLang 0.5.23"):  # each engine's table, as the README promises
        assert f"{title}\n" in shown.stdout, shown.stdout
    assert "TensorRT-LLM 1.2.x does not load this checkpoint" in shown.stdout


# -- a documented fast subset, selected by the markers pyproject.toml registers ----------------------------


def test_the_fast_subset_is_documented_with_registered_markers() -> None:
    readme = (ROOT / "README.md").read_text()
    development = readme.split("## Development", 1)[1]
    command = re.search(r"```bash\n(.*pytest.*)\n```", development)
    assert command, "README's Development section shows the fast subset's command"
    assert command.group(1) in (ROOT / "docs" / "design.md").read_text()
    expression = re.search(r'-m "([^"]+)"', command.group(1))
    assert expression and expression.group(1) == "not slow and not engine and not vendor"
    registered = (ROOT / "pyproject.toml").read_text().split("markers = [", 1)[1].split("]", 1)[0]
    for marker in ("slow", "engine", "vendor"):
        assert f'"{marker}: ' in registered
    from tests.project.test_readme import _readme_commands

    assert _readme_commands()[1] == "bash scripts/setup.sh --test && .venv/bin/python -m pytest -q"  # (b): everything


# -- README's per-module scheme example runs as written ------------------------------------------------------


def test_readme_scheme_for_example_runs_as_written(tmp_path: Path) -> None:
    """The README's `--scheme-for lm_head=nvfp4 --format modelopt` command exits 0 as shown."""
    readme = (ROOT / "README.md").read_text()
    commands = [
        line.strip()
        for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
        for line in block.splitlines()
        if "--scheme-for lm_head=nvfp4" in line
    ]
    assert len(commands) == 1, commands
    (tmp_path / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    args = shlex.split(commands[0])
    assert args[0] == ".venv/bin/eaglequant" and "--target-layers" in args
    shown = as_user(*args[1:], cwd=tmp_path, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.stderr
    assert "MIXED_PRECISION" in (tmp_path / "out" / "pair-mixed" / "config.json").read_text()
