"""The command line at a terminal: names kept whole at any width, one error line, help at 80 columns, each
message said once and worded in step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.as_user import as_user, converted_copy
from tests.conftest import FIXTURES, ROOT
from tests.project.test_bad_input import assert_refused


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_copy(tmp_path_factory)


# -- schemes keeps the names a user types whole at any width ----------------------------------------------


@pytest.mark.parametrize("columns", ["80", "120", "200"])
def test_schemes_keeps_every_name_whole(columns: str) -> None:
    data = json.loads(as_user("schemes", "--json").stdout)
    rows, modules = data["schemes"], data["modules"]
    shown = as_user("schemes", env={"COLUMNS": columns})
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "…" not in shown.stdout and all(len(line) <= int(columns) for line in lines)
    assert all(line == line.rstrip() for line in lines if "│" not in line and "┃" not in line)
    for row in rows:
        assert row["name"] in shown.stdout and all(f["format"] in shown.stdout for f in row["formats"])
    # under 7 lines a scheme (name, summary, two per format at 80 columns for five engine releases): one line a word
    # in a squeezed summary column made ~12
    assert len(lines) < 7 * len(rows) + 3 * len(modules)  # and up to 3 a row of what each engine runs per module
    for engine in ("vllm", "vllm==0.33.0", "trtllm", "sglang", "trtllm-main"):  # the names --engine takes
        assert engine in shown.stdout
    assert not any(line.endswith("--target-") for line in lines)  # the legend wraps between words, not in a flag


def test_schemes_names_where_a_conditional_cell_loads_and_which_rows_do_not_load() -> None:
    """Issue 55, item 8: ``yes*`` names the hardware or versions, a format a release loads in no scheme says so
    instead of answering its questions, and the legend keeps each entry whole in 80 columns."""
    data = json.loads(as_user("schemes", "--json").stdout)
    cells = [cell for row in data["schemes"] for f in row["formats"] for cell in f["engines"].values() if cell]
    assert all(cell["where"] for cell in cells if cell["conditional"]) and any(c["conditional"] for c in cells)
    shown = as_user("schemes", env={"COLUMNS": "80"}).stdout
    assert "yes* (W4A4 on Blackwell)" in shown and "yes* (ROCm only)" in shown
    assert re.search(r"yes\*(?! \()", shown.split("what each engine runs")[0].replace("yes* (where)", "")) is None
    trtllm_quark = next(row for row in data["modules"] if row["engine"] == "trtllm" and row["format"] == "quark")
    assert trtllm_quark["loads"] is False and "trtllm quark: lm_head quantized not loaded" in " ".join(shown.split())
    vllm_quark = next(row for row in data["modules"] if row["engine"] == "vllm" and row["format"] == "quark")
    assert vllm_quark["loads"] is True
    legend = " ".join(shown[shown.index("yes: loads") : shown.index("each cell's engine source")].split())
    assert "yes* (where): loads only on the hardware or versions named · no: refused" in legend
    for line in shown[shown.index("releases: ") :].splitlines()[:3]:
        assert not line.rstrip().endswith(("vLLM", "TensorRT-LLM", "SGLang", "main")), line  # an entry kept whole


# -- a usage error is one error: line; the bare command is its help ---------------------------------------


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (
            ["convert", "SRC", "OUT", "--shceme", "x"],
            ("No such option: --shceme", "--scheme", "'eaglequant convert -h'"),
        ),
        (["convert", "SRC", "OUT", "--workers", "many"], ("'--workers'", "'eaglequant convert -h'")),
        (["convert"], ("Missing argument 'SRC'", "'eaglequant convert -h'")),
        (["conver"], ("No such command 'conver'", "'eaglequant -h'")),
        (["bench", "nope"], ("No such command 'nope'", "'eaglequant bench -h'")),
    ],
    ids=["option", "value", "argument", "command", "subcommand"],
)
def test_a_usage_error_is_one_error_line(args: list[str], expect: tuple[str, ...], tmp_path: Path) -> None:
    args = [
        str(FIXTURES / "specforge-llama") if a == "SRC" else str(tmp_path / "out") if a == "OUT" else a for a in args
    ]
    line = assert_refused(as_user(*args), expect)
    assert "╭" not in line and "Usage:" not in line
    as_json = as_user(*args, "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["error"]["type"] == "UsageError"
    assert as_json.stderr.strip().splitlines() == [line], as_json.stderr


def test_the_bare_command_prints_its_help_and_exits_0() -> None:
    for args in ([], ["bench"]):
        shown = as_user(*args)
        assert shown.exit_code == 0 and "Usage: eaglequant" in shown.stdout and shown.stderr == "", args


# -- help at 80 columns ------------------------------------------------------------------------------------

HELP_COMMANDS = [
    ["inspect"],
    ["convert"],
    ["explain"],
    ["verify"],
    ["upload"],
    ["batch"],
    ["batch-merge"],
    ["schemes"],
    ["bench", "convert"],
    ["bench", "kernels"],
]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=[" ".join(c) for c in HELP_COMMANDS])
def test_help_at_80_columns_reads_as_a_user_types(command: list[str]) -> None:
    shown = as_user(*command, "--help", env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.stderr
    text = shown.stdout
    assert "completion" not in text  # --install-completion / --show-completion: not ours to offer per command
    for python_type in ("<str>", "<int", "<path>", "<list[", "<float>", "<Path>"):
        assert python_type not in text, (python_type, text)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage, usage
    assert "\\[" not in text and "…" not in text
    if command == ["convert"]:
        assert "Usage: eaglequant convert [OPTIONS] SRC DST" in usage
        assert len(text.splitlines()) < 90  # descriptions get room: 112 lines before
    if command == ["batch-merge"]:
        assert usage.split("[OPTIONS]")[1].strip() == "SUMMARY..."


# -- noise and polish ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_readme_python_snippet_runs_twice(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    snippet = readme.split("The same from Python:\n\n```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", snippet],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_verify_and_upload_say_it_once_and_in_step(converted: Path) -> None:
    shown = as_user("verify", converted, "--tokens", "16", env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.stderr
    assert "draft head over 16 positions (synthetic: seed 0):" in shown.stdout  # not "..., 16 positions)" again
    assert re.search(r"\(1 flip,|\((0|[2-9]\d*|1\d+) flips,", shown.stdout), shown.stdout
    explained = as_user("explain", converted, env={"COLUMNS": "200"})
    assert "vLLM 0.32.0\n" in explained.stdout  # a table title without the table's width of spaces after it
    dry = as_user("upload", converted, "org/name", "--dry-run", "--force", env={"HF_HUB_OFFLINE": "1"})
    assert dry.exit_code == 0, dry.stderr
    assert "then uploading" not in dry.stderr
    sizes = [line for line in dry.stdout.splitlines() if line.startswith("  ") and line.rstrip()[-1] == "B"]
    assert len(sizes) > 2 and len({len(line) for line in sizes}) == 1, sizes  # one column of sizes


def test_plurals_and_the_engine_load_title(capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.cli.output import plural
    from eaglequant.cli.verify_cmd import render_engine_load
    from eaglequant.engine_load import LoadCheck

    assert (plural(1, "flip"), plural(0, "flip"), plural(2, "summary", "summaries")) == (
        "1 flip",
        "0 flips",
        "2 summaries",
    )
    render_engine_load(LoadCheck("vllm", "0.32.0", Path("x"), loaded=False, error="boom", patches=()))
    assert "vLLM 0.32.0 loading x: failed: boom" in capsys.readouterr().out  # the engine's name, as elsewhere


def test_a_scheme_file_missing_a_key_says_what_to_do(tmp_path: Path) -> None:
    shown = as_user("schemes", "--show", "fp8-per-channel")
    custom = tmp_path / "mine.toml"
    custom.write_text("\n".join(line for line in shown.stdout.splitlines() if not line.startswith("name")) + "\n")
    assert_refused(
        as_user("inspect", FIXTURES / "specforge-llama", "--scheme", custom),
        ("missing key 'name'", "; add it", "eaglequant schemes --show"),
    )
