"""Flags, help, messages that name the right thing, safe --overwrite, setup.sh, and the command line's smaller
promises, each held by a test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import eaglequant
from eaglequant.cli.command import cli_wording
from eaglequant.common.errors import OutputError, placeholder, switch, worded, words
from tests.conftest import FIXTURES, ROOT, run_cli, run_cli_subprocess
from tests.project.test_bad_input import assert_refused

SRC = FIXTURES / "specforge-llama"


def test_debug_quiet_verbose_and_h_work_after_the_command(tmp_path: Path) -> None:
    result = run_cli("convert", SRC, tmp_path / "out", "--debug", "-v", "--json")
    assert result.exit_code == 0, result.stderr
    assert run_cli("convert", "-h").exit_code == 0 and "--overwrite-any" in run_cli("convert", "-h").stdout
    assert run_cli("-h").exit_code == 0
    for command in ("inspect", "explain", "verify", "upload", "batch", "schemes"):
        usage = run_cli(command, "-h").stdout
        assert "--quiet" in usage and "-q" in usage and "--verbose" in usage and "--debug" in usage, command


def test_q_is_quiet_not_quantize_and_f_is_refused(tmp_path: Path) -> None:
    result = run_cli("convert", SRC, tmp_path / "out", "-q", "--verify")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    refused = run_cli("convert", SRC, tmp_path / "other", "-f", "quark")
    assert refused.exit_code == 2


def test_help_has_no_bool_markers_names_src_dst_and_keeps_sentences_whole() -> None:
    proc = run_cli_subprocess("convert", "--help", env={"COLUMNS": "200"})
    assert "<bool>" not in proc.stdout
    assert "SRC" in proc.stdout and "DST" in proc.stdout and "org/name[@revision]" in proc.stdout
    batch = run_cli_subprocess("batch", "--help", env={"COLUMNS": "200"}).stdout
    assert "a failed job does not stop the others" in batch  # the docstring's line break is gone


@pytest.mark.parametrize(
    ("args", "expect", "unexpected"),
    [
        (["explain", "nosuch"], ("nosuch", "DST"), "SRC"),
        (["verify", str(SRC)], ("no quantization_config", "eaglequant convert"), "explain reads"),
        (["convert", str(SRC), "OUT", "--scheme", "nvfp4", "--calib", "nope.safetensors"], ("no such file",), None),
        (
            ["convert", str(SRC), "OUT", "--exclude", "midlayer.self_attn.q_proj"],
            ("midlayer.self_attn.k_proj",),
            "layers.0",
        ),
        (["inspect", "NOCONFIG"], ("config.json is missing", "; "), None),
        (["inspect", str(SRC), "--scheme", "mxfp4", "--engine", "trtllm"], ("--scheme nvfp4",), "fp8-per-channel"),
    ],
    ids=["explain-dst", "verify-unquantized", "calib-missing", "fused-names", "no-config", "mxfp4-trtllm"],
)
def test_messages_name_the_right_thing(
    tmp_path: Path, args: list[str], expect: tuple[str, ...], unexpected: str | None
) -> None:
    (tmp_path / "NOCONFIG").mkdir()
    args = [str(tmp_path / a) if a in ("OUT", "NOCONFIG") else a for a in args]
    line = assert_refused(run_cli(*args), expect)
    if unexpected:
        assert unexpected not in line.replace(str(SRC), ""), line


def test_overwrite_replaces_only_what_eaglequant_wrote(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("notes")
    assert_refused(run_cli("convert", SRC, precious, "--overwrite"), ("not written by eaglequant", "--overwrite-any"))
    assert (precious / "notes.txt").read_text() == "notes"
    assert run_cli("convert", SRC, precious, "--overwrite-any").exit_code == 0
    assert not (precious / "notes.txt").exists() and (precious / "eaglequant_report.json").is_file()
    assert run_cli("convert", SRC, precious, "--overwrite").exit_code == 0  # now eaglequant's: replaced


def test_the_library_names_parameters_and_the_cli_flags(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    with pytest.raises(OutputError) as raised:
        eaglequant.convert(SRC, dst)
    assert "overwrite=True" in str(raised.value) and "--overwrite" not in str(raised.value)
    assert raised.value.one_line(cli_wording).count("--overwrite") == 1
    hint = words("pass ", placeholder("source", "SRC"), ", or ", switch("force"))
    assert worded(hint, cli_wording) == "pass --source SRC, or --force"


@pytest.mark.slow
def test_batch_lines_say_it_plainly(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[job]]\nsource = "{SRC}"\ndestination = "out"\n')
    proc = run_cli_subprocess("batch", jobs, "--summary", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stderr and "verify ok" not in proc.stderr and "(absent" not in proc.stderr


@pytest.mark.slow
def test_bench_convert_tiny_skips_the_vendor_anchors_unless_asked(tmp_path: Path) -> None:
    from eaglequant.bench.convert import bench_convert

    result = bench_convert(tmp_path / "cache", tmp_path / "work", heads=("tiny",), schemes=("mxfp4",))
    assert {run["kind"] for run in result["runs"]} == {"copy", "round-trip", "eaglequant"}


def test_docs_speak_to_users() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = path.read_text()
        assert "FORMATS.md" not in text and "the team" not in text, path


def _setup_tree(tmp_path: Path) -> Path:
    """A copy of scripts/setup.sh in an empty tree, so it never touches this checkout's .venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    return tmp_path


def _fake_python(path: Path, version: str) -> Path:
    """Answers the version query with ``version``; ``-m venv DIR`` makes a DIR/bin/python that does too."""
    path.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = "-c" ]; then echo {version}; exit 0; fi\n'
        'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; '
        f'printf \'#!/bin/bash\\n[ "$1" = "-c" ] && echo {version}\\nexit 0\\n\' > "$3/bin/python"; '
        'chmod +x "$3/bin/python"; touch "$3/rebuilt"; fi\n'
        "exit 0\n"
    )
    path.chmod(0o755)
    return path


def test_setup_refuses_an_old_python(tmp_path: Path) -> None:
    tree = _setup_tree(tmp_path)
    old = _fake_python(tmp_path / "python3.9", "3.9")
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")],
        env={**os.environ, "PYTHON": str(old)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "3.9" in proc.stderr and ">= 3.10" in proc.stderr and "PYTHON=" in proc.stderr
    assert not (tree / ".venv").exists()


def test_setup_says_an_interpreter_that_cannot_run_could_not_run(tmp_path: Path) -> None:
    """Issue 48, item 18: an interpreter that exists but exits non-zero is not blamed for its version."""
    tree = _setup_tree(tmp_path)
    broken = tmp_path / "python3.12"
    broken.write_text("#!/bin/bash\necho 'error while loading shared libraries' >&2\nexit 127\n")
    broken.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")],
        env={**os.environ, "PYTHON": str(broken)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and f"error: {broken} could not run" in proc.stderr, proc.stderr
    assert "PYTHON=/path/to/python3.X" in proc.stderr and "Python ?" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tree / ".venv").exists()


def test_setup_rebuilds_a_venv_made_by_another_python(tmp_path: Path) -> None:
    tree = _setup_tree(tmp_path)
    _fake_python(tmp_path / "python3.9", "3.9").rename(tmp_path / "old")
    (tree / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(tmp_path / "old", tree / ".venv" / "bin" / "python")
    new = _fake_python(tmp_path / "python3.12", "3.12")
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")],
        env={**os.environ, "PYTHON": str(new)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "rebuilding" in proc.stderr and (tree / ".venv" / "rebuilt").exists()


def test_capture_without_transformers_names_this_interpreters_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48, item 17: the hint installs into the Python that runs eaglequant, whatever pip is first on PATH."""
    import shlex
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    pair = FIXTURES / "trained-pair"
    result = run_cli("capture", tmp_path / "c.safetensors", "--target", pair / "target", "--draft", pair / "draft")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{shlex.quote(sys.executable)} -m pip install 'eaglequant[capture]'" in " ".join(result.stderr.split())
