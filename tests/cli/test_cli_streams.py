"""Streams as a terminal, a pipe and CI see them: results on stdout, the rest on stderr, JSON errors, progress
that counts what it says (through a real pseudo-terminal), tables that keep every module name whole."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_cli_subprocess

SRC = FIXTURES / "specforge-llama"
MLA = FIXTURES / "torchspec-mla"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("streams") / "llama-nvfp4"
    proc = run_cli_subprocess("convert", SRC, dst, "--scheme", "nvfp4", "--format", "modelopt", "--verify")
    assert proc.returncode == 0, proc.stderr
    return dst


def _jobs(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[job]]\nsource = "{SRC}"\ndestination = "batch-out"\nverify = false\n')
    return jobs


def _commands(tmp_path: Path, converted: Path) -> dict[str, tuple[list[object], str]]:
    """command -> (arguments, a piece of its result that must be on stdout and not on stderr)."""
    bench = tmp_path / "bench"
    return {
        "inspect": (["inspect", SRC], "midlayer.self_attn.q_proj.weight"),
        "convert": (["convert", SRC, tmp_path / "out"], "wrote "),  # -q: only this line (no tables)
        "explain": (["explain", converted], "runtime module"),
        "verify": (["verify", converted], "per-layer parity"),
        "upload": (["upload", converted, "org/name", "--dry-run"], "model.safetensors"),
        "batch": (["batch", _jobs(tmp_path), "--summary", tmp_path / "s.json"], "converted, 0 skipped"),
        "schemes": (["schemes"], "fp8-per-channel"),
        "bench kernels": (["bench", "kernels", "--device", "cpu", "--tiny", "--m", "1"], "TFLOP/s"),
        "bench convert": (["bench", "convert", "--head", "tiny", "--cache-dir", bench, "--scheme", "mxfp4"], "× copy"),
    }


@pytest.mark.parametrize(
    "name",
    [
        *["inspect", "convert", "explain", "verify", "upload", "batch", "schemes", "bench kernels"],
        pytest.param("bench convert", marks=pytest.mark.slow),
    ],
)
def test_each_command_prints_its_result_on_stdout_and_the_rest_on_stderr(
    name: str, tmp_path: Path, converted: Path
) -> None:
    args, marker = _commands(tmp_path, converted)[name]
    proc = run_cli_subprocess(*args)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout, proc.stdout
    assert marker not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "name", ["inspect", "convert", "explain", pytest.param("verify", marks=pytest.mark.slow), "schemes"]
)
def test_quiet_leaves_only_the_result(name: str, tmp_path: Path, converted: Path) -> None:
    args, marker = _commands(tmp_path, converted)[name]
    proc = run_cli_subprocess(*args, "-q")
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and proc.stderr == ""


def test_quiet_convert_and_capture_print_only_the_written_line(tmp_path: Path) -> None:
    """Issue 48, item 12: no tables under -q, and no transformers progress bar, log or warning."""
    proc = run_cli_subprocess("convert", SRC, tmp_path / "out", "--verify", "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("wrote ") and lines[1] == "verification: passed", proc.stdout
    pair = FIXTURES / "trained-pair"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text((pair / "prompts.jsonl").read_text().splitlines()[0] + "\n")
    args = ["capture", tmp_path / "c.safetensors", "--target", pair / "target", "--draft", pair / "draft"]
    proc = run_cli_subprocess(*args, "--prompts", prompts, "--max-tokens", "8", "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and proc.stdout.startswith("wrote "), proc.stdout


def test_phases_are_timed_log_lines_off_a_terminal(tmp_path: Path) -> None:
    proc = run_cli_subprocess("convert", SRC, tmp_path / "out", "--verify")
    assert proc.returncode == 0, proc.stderr
    phases = re.findall(r"^\d\d:\d\d:\d\d ([a-z ]+): \d+\.\d\d s", proc.stderr, re.M)
    assert phases[:2] == ["reading", "writing"] and "verifying" in phases
    assert "\r" not in proc.stderr and "━" not in proc.stderr  # no bar in a log


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "nosuch"],
        ["convert", SRC, "out", "--scheme", "nvfp"],
        ["explain", "nosuch"],
        ["convert", SRC, "out", "--bogus-option"],
    ],
    ids=["inspect", "convert-scheme", "explain", "usage"],
)
def test_errors_under_json_are_one_json_object_on_stdout(args: list[object], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "eaglequant", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["exit_code"] == 2
    assert data["error"]["type"] and data["error"]["message"]
    assert proc.stderr.strip().splitlines()[-1].startswith(("error:", "╰")) or "Error" in proc.stderr


def test_json_paths_are_absolute(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "eaglequant", "convert", str(SRC), "rel-out", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["destination"] == str(tmp_path / "rel-out") and Path(data["source"]).is_absolute()


# A task per few rows, so a weight is written in many pieces: the counter must still count tensors.
_SMALL_TASKS = (
    "import sys, eaglequant.conversion.pipeline as p; p.QUANTIZE_TASK_ELEMENTS = 1024; p.COPY_TASK_BYTES = 4096; "
    "from eaglequant.cli import main; main(sys.argv[1:])"
)


def _run_in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal; everything it drew."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SMALL_TASKS, *args],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "160", "TERM": "xterm", **env},
        close_fds=True,
    )
    os.close(terminal)
    drawn = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        drawn += chunk
    proc.wait(timeout=60)
    os.close(controller)
    assert proc.returncode == 0, drawn.decode(errors="replace")
    return drawn.decode(errors="replace")


@pytest.mark.parametrize(
    "env",
    [
        {},
        pytest.param({"HF_HUB_DISABLE_PROGRESS_BARS": "0"}, marks=pytest.mark.slow),
        pytest.param({"EAGLEQUANT_DISABLE_PROGRESS_BARS": "false"}, marks=pytest.mark.slow),
    ],
    ids=["default", "hf-0", "eaglequant-false"],
)
def test_terminal_progress_counts_tensors_and_shows_verification(tmp_path: Path, env: dict[str, str]) -> None:
    drawn = _run_in_terminal(
        ["convert", str(SRC), str(tmp_path / "out"), "--scheme", "nvfp4", "--format", "modelopt", "--verify"], env
    )
    counters = [(int(done), int(total)) for done, total in re.findall(r"(\d+)/(\d+) tensors", drawn)]
    assert counters, drawn  # the bar showed (a switch set to 0 or false does not turn it off)
    assert all(done <= total for done, total in counters), counters
    assert max(done for done, _ in counters) == counters[0][1]  # it reaches the total
    assert "verifying" in drawn


def test_a_true_switch_turns_the_bars_off(tmp_path: Path) -> None:
    drawn = _run_in_terminal(["convert", str(SRC), str(tmp_path / "out")], {"EAGLEQUANT_DISABLE_PROGRESS_BARS": "yes"})
    assert not re.search(r"\d+/\d+ tensors", drawn.split("writing:")[0])  # no live bar, only the phase lines
    assert re.search(r"\d\d:\d\d:\d\d writing: ", drawn)


def _module_names(data: dict[str, object], key: str, field: str) -> set[str]:
    rows = data[key]
    assert isinstance(rows, list)
    return {row[field] for row in rows}


@pytest.mark.parametrize("columns", ["80", "120"])
@pytest.mark.slow
def test_verify_and_explain_keep_every_module_name_whole(converted: Path, columns: str) -> None:
    verified = json.loads(run_cli_subprocess("verify", converted, "--json").stdout)
    proc = run_cli_subprocess("verify", converted, env={"COLUMNS": columns})
    assert proc.returncode == 0, proc.stderr
    for name in _module_names(verified, "layers", "module"):
        assert name in proc.stdout, (name, proc.stdout)
    assert "…" not in proc.stdout
    assert all(len(line) <= int(columns) for line in proc.stdout.splitlines() if "│" in line)

    explained = json.loads(run_cli_subprocess("explain", converted, "--engine", "all", "--json").stdout)
    proc = run_cli_subprocess("explain", converted, "--engine", "all", env={"COLUMNS": columns})
    names = {m["runtime_module"] for e in explained["engines"] if e["loads"] for m in e["modules"]}
    assert names
    for name in names:
        assert name in proc.stdout, (name, proc.stdout)
    assert "…" not in proc.stdout
