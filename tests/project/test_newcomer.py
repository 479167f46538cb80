"""The command line as a first-time user meets it: Hub errors, mistyped paths, where the engine venvs are found,
``--engine all``, the recorded source, names kept whole, one error line, help at 80 columns, messages worded once,
the target's layer count, checkpoint names, what README command (a) shows, the documented fast subset.

Most cases run the CLI in a subprocess, as a user meets it (exit codes, stderr, imports); layout cases render at
``COLUMNS=80``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, CliResult, run_cli_subprocess, vendor_required, write_calibration
from tests.project.test_bad_input import assert_refused


def _cli(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, code: str = "") -> CliResult:
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


# -- huggingface_hub 2.x raises httpx2's errors, which are not httpx.HTTPError ---------------------------

# An httpx2-style client: its ConnectError derives from its own HTTPError, not from httpx's nor from OSError.
_HTTPX2_REFUSES = """
import sys, types
try:  # huggingface_hub 2.x brings httpx2 (a plain install on Python 3.10 resolves it)
    from httpx2 import ConnectError
except ImportError:  # 1.x, on httpx: a stand-in httpx2 that only raises
    httpx2 = types.ModuleType("httpx2")
    class HTTPError(Exception): pass
    class ConnectError(HTTPError): pass
    httpx2.HTTPError, httpx2.ConnectError = HTTPError, ConnectError
    sys.modules["httpx2"] = httpx2
import huggingface_hub
def refuse(*args, **kwargs):
    raise ConnectError("[Errno 111] Connection refused")
huggingface_hub.HfApi.model_info = refuse
"""


def test_an_httpx2_connect_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0", "EAGLEQUANT_DISABLE_PROGRESS_BARS": "1"}
    result = _cli("inspect", "org/somewhere", env=env, code=_HTTPX2_REFUSES)
    line = assert_refused(result, ("org/somewhere", "cannot reach the Hub", "Connection refused", "the network"))
    assert "internal error" not in line and "ConnectError" not in line


def test_hub_errors_under_the_huggingface_hub_2_that_the_vllm_venv_holds(tmp_path: Path) -> None:
    """The real second major: ``.venv-vllm`` (made by ``setup.sh --test``) has huggingface_hub 2.x on httpx2 and no
    httpx, so CI runs the Hub's error path under both majors."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        message = f"no {python} (scripts/setup.sh --test makes it)"
        if vendor_required():
            pytest.fail(message)
        pytest.skip(message)
    code = (
        "import huggingface_hub, sys\n"
        "from eaglequant.hub import client as hub\n"
        "assert huggingface_hub.__version__.startswith('2.'), huggingface_hub.__version__\n"
        "try:\n    hub.resolve_source('org/somewhere')\n"
        "except hub.HubError as exc:\n    print(exc.one_line())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # port 9: nothing listens
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("org/somewhere: ") and "cannot reach the Hub (http://127.0.0.1:9)" in proc.stdout


# -- a mistyped local path is not a Hub request --------------------------------------------------------

UNREACHABLE_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}  # port 9: nothing listens


def test_a_mistyped_path_whose_parent_exists_is_no_such_directory(tmp_path: Path) -> None:
    (tmp_path / "fixtures").mkdir()
    env = {**UNREACHABLE_HUB, "HF_HOME": str(tmp_path / "hf-home")}
    line = assert_refused(
        _cli("inspect", "fixtures/nope", env=env, cwd=tmp_path), ("fixtures/nope", "no such directory")
    )
    assert "hf://fixtures/nope" in line and "Hub (" not in line
    forced = assert_refused(_cli("inspect", "hf://fixtures/nope", env=env, cwd=tmp_path), ("cannot reach the Hub",))
    assert "no local directory" not in forced and "hf://" not in forced


def test_an_unreachable_hub_for_an_org_name_says_no_such_local_directory(tmp_path: Path) -> None:
    env = {**UNREACHABLE_HUB, "HF_HOME": str(tmp_path / "hf-home")}
    line = assert_refused(_cli("inspect", "org/nope", env=env, cwd=tmp_path), ("org/nope", "cannot reach the Hub"))
    assert "no local directory of that name" in line and "check the path" in line


def test_a_missing_dot_path_does_not_exist(tmp_path: Path) -> None:
    line = assert_refused(_cli("inspect", "./nope", cwd=tmp_path), ("./nope", "does not exist"))
    assert "not a directory" not in line
    assert_refused(_cli("explain", "nope", cwd=tmp_path), ("nope: does not exist", "DST"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A conversion of a copy of the smallest fixture, whose report records that copy as its source."""
    work = tmp_path_factory.mktemp("converted")
    shutil.copytree(FIXTURES / "specforge-llama", work / "src")
    proc = run_cli_subprocess("convert", work / "src", work / "dst")
    assert proc.returncode == 0, proc.stderr
    return work / "dst"


def test_verify_names_source_not_src_for_a_missing_source(converted: Path) -> None:
    line = assert_refused(_cli("verify", converted, "--source", "/missing"), ("--source", "/missing", "does not exist"))
    assert "SRC" not in line


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
    result = _cli(
        "verify", converted, "--load-with", "sglang", env={"EAGLEQUANT_SGLANG_PYTHON": ""}, cwd=tmp_path, code=code
    )
    line = assert_refused(result, ("SGLang is not installed", "--engine-python", "scripts/setup.sh --test"))
    assert str(tmp_path / ".venv-sglang") in line and str(tmp_path / "env" / ".venv-sglang") in line


# -- --engine all means every engine in convert and inspect too ----------------------------------------


@pytest.mark.slow
def test_engine_all_in_convert_and_inspect_is_every_engine(tmp_path: Path) -> None:
    from eaglequant.engines import ENGINES

    line = assert_refused(
        _cli("convert", FIXTURES / "specforge-llama", tmp_path / "quark", "--engine", "all"),
        ("TensorRT-LLM cannot load", "--scheme nvfp4 --format modelopt with captured inputs (convert --calib FILE)"),
    )
    assert "unknown engine" not in line
    calib = write_calibration("specforge-llama", tmp_path / "calib.safetensors")
    dst = tmp_path / "every"
    args = ("--engine", "all", "--scheme", "nvfp4", "--format", "modelopt")
    assert_refused(  # inspect has no --calib: nvfp4 is W4A16 there, which TensorRT-LLM 1.2.x does not load
        _cli("inspect", FIXTURES / "specforge-llama", *args),
        ("TensorRT-LLM cannot load nvfp4", "use --format modelopt with captured inputs", "which every engine can load"),
    )
    args = (*args, "--calib", calib)
    converted = _cli("convert", FIXTURES / "specforge-llama", dst, *args, "--json")
    assert converted.exit_code == 0, converted.stderr
    assert json.loads((dst / "eaglequant_report.json").read_text())["engines"] == list(ENGINES)
    unknown = assert_refused(_cli("inspect", FIXTURES / "specforge-llama", "--engine", "bogus"), ("unknown engine",))
    assert "or all" in unknown


# -- explain --engine all says what it judged -------------------------------------------------------------


@pytest.mark.slow
def test_engine_all_lists_every_engine_and_judges_those_that_load_it(converted: Path) -> None:
    """Quark: TensorRT-LLM cannot read it. ``--engine all`` lists it (not judged, said so in the verdict line and
    the JSON); ``--engine trtllm`` requires it (exit 3), in explain and verify alike."""
    every = _cli("explain", converted, "--engine", "all", env={"COLUMNS": "200"})
    assert every.exit_code == 0, every.stdout + every.stderr
    verdict = every.stdout.strip().splitlines()[-1]
    assert "TensorRT-LLM, TensorRT-LLM main cannot load it" in verdict and "--engine" in verdict
    assert "each engine above applies" not in every.stdout
    data = json.loads(_cli("explain", converted, "--engine", "all", "--json").stdout)
    judged = {e["engine"]: (e["loads"], e["judged"]) for e in data["engines"]}
    assert data["ok"] and judged["trtllm"] == (False, False) and judged["vllm"] == (True, True)
    named = _cli("explain", converted, "--engine", "trtllm", "--json")
    assert named.exit_code == 3 and json.loads(named.stdout)["engines"][0]["judged"] is True
    assert _cli("verify", converted, "--engine", "all", "--tokens", "16").exit_code == 0
    assert _cli("verify", converted, "--engine", "trtllm", "--tokens", "16").exit_code == 3


# -- the recorded source is gone: verify names the path it looked for ----------------------------------


@pytest.mark.slow
def test_verify_names_the_recorded_source_that_is_gone(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "specforge-llama", tmp_path / "src")
    assert run_cli_subprocess("convert", tmp_path / "src", tmp_path / "dst").returncode == 0
    shutil.rmtree(tmp_path / "src")
    human = _cli("verify", tmp_path / "dst", env={"COLUMNS": "300"})
    assert human.exit_code == 5, human.stderr
    assert f"its recorded source, {tmp_path / 'src'}, is gone" in human.stdout, human.stdout
    data = json.loads(_cli("verify", tmp_path / "dst", "--json").stdout)
    assert data["verdict"] == "not verified numerically" and data["recorded_source"] == str(tmp_path / "src")


# -- schemes keeps the names a user types whole at any width ----------------------------------------------


@pytest.mark.parametrize("columns", ["80", "120", "200"])
def test_schemes_keeps_every_name_whole(columns: str) -> None:
    rows = json.loads(_cli("schemes", "--json").stdout)
    shown = _cli("schemes", env={"COLUMNS": columns})
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "…" not in shown.stdout and all(len(line) <= int(columns) for line in lines)
    assert all(line == line.rstrip() for line in lines if "│" not in line and "┃" not in line)
    for row in rows:
        assert row["name"] in shown.stdout and all(f["format"] in shown.stdout for f in row["formats"])
    # under 7 lines a scheme (name, summary, two per format at 80 columns for five engine releases): one line a word
    # in a squeezed summary column made ~12
    assert len(lines) < 7 * len(rows)
    for engine in ("vllm", "vllm==0.33.0", "trtllm", "sglang", "trtllm-main"):  # the names --engine takes
        assert engine in shown.stdout


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
    line = assert_refused(_cli(*args), expect)
    assert "╭" not in line and "Usage:" not in line
    as_json = _cli(*args, "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["error"]["type"] == "UsageError"
    assert as_json.stderr.strip().splitlines() == [line], as_json.stderr


def test_the_bare_command_prints_its_help_and_exits_0() -> None:
    for args in ([], ["bench"]):
        shown = _cli(*args)
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
    shown = _cli(*command, "--help", env={"COLUMNS": "80"})
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
    shown = _cli("verify", converted, "--tokens", "16", env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.stderr
    assert "draft head over 16 positions (synthetic: seed 0):" in shown.stdout  # not "..., 16 positions)" again
    assert re.search(r"\(1 flip,|\((0|[2-9]\d*|1\d+) flips,", shown.stdout), shown.stdout
    explained = _cli("explain", converted, env={"COLUMNS": "200"})
    assert "vLLM 0.32.0\n" in explained.stdout  # a table title without the table's width of spaces after it
    dry = _cli("upload", converted, "org/name", "--dry-run", "--force", env={"HF_HUB_OFFLINE": "1"})
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
    shown = _cli("schemes", "--show", "fp8-per-channel")
    custom = tmp_path / "mine.toml"
    custom.write_text("\n".join(line for line in shown.stdout.splitlines() if not line.startswith("name")) + "\n")
    assert_refused(
        _cli("inspect", FIXTURES / "specforge-llama", "--scheme", custom),
        ("missing key 'name'", "; add it", "eaglequant schemes --show"),
    )


# -- a listed pair on the bundled fixture says why it needs the layer count and what N is -------------------


def test_native_fp8_on_the_fixture_says_what_is_kept_why_and_what_n_is(tmp_path: Path) -> None:
    """The fixture's k_proj has 64 rows, so block FP8 keeps q/k/v unquantized on its own; vLLM reads a native fp8
    config's exclusions by exact name, and the draft's layer is numbered after the target's: the line says all that
    in the checkpoint's names, and where N comes from; the target's config.json then does it."""
    src, dst = FIXTURES / "specforge-llama", tmp_path / "x"
    line = assert_refused(
        _cli("convert", src, dst, "--scheme", "fp8-block", "--format", "fp8"),
        (
            "midlayer.self_attn.q_proj, midlayer.self_attn.k_proj, midlayer.self_attn.v_proj",
            "midlayer.self_attn.k_proj: out-features 64 is not a multiple of 128",
            "are kept unquantized",
            "by exact name",
            "model.layers.{L}.self_attn.qkv_proj",
            "--target-layers N",
            "num_hidden_layers (in its config.json",
            "--target-config",
        ),
    )
    assert not re.search(r"(?<![.\w])layers\.0\.", line), line  # no canonical names the checkpoint does not have
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": 32}))
    done = _cli("convert", src, dst, "--scheme", "fp8-block", "--format", "fp8", "--target-config", target)
    assert done.exit_code == 0, done.stderr
    rules = json.loads((dst / "config.json").read_text())["quantization_config"]["modules_to_not_convert"]
    assert "model.layers.32.self_attn.qkv_proj" in rules


def test_schemes_marks_the_pairs_that_need_the_layer_count() -> None:
    rows = json.loads(_cli("schemes", "--json").stdout)
    marked = [
        (row["name"], fmt["format"], engine)
        for row in rows
        for fmt in row["formats"]
        for engine, cell in fmt["engines"].items()
        if cell and cell["needs_target_layers"]
    ]
    assert marked == [("fp8-block", "fp8", "vllm"), ("fp8-block", "fp8", "vllm==0.33.0")]
    for columns in ("80", "200"):
        shown = _cli("schemes", env={"COLUMNS": columns}).stdout
        assert "yes* +L" in shown and "+L: keeping a decoder linear unquantized" in shown, shown


# -- one naming scheme, the checkpoint's, with the engines' runtime name beside it -------------------------


def test_kept_linears_are_named_as_the_checkpoint_names_them(tmp_path: Path) -> None:
    shown = _cli(
        "convert",
        FIXTURES / "specforge-llama",
        tmp_path / "y",
        "--scheme",
        "fp8-block",
        "--format",
        "compressed-tensors",
        env={"COLUMNS": "400"},
    )
    assert shown.exit_code == 0, shown.stderr
    canonical = re.compile(r"(?<![.\w])layers\.0\.")  # the checkpoint has only midlayer.* names
    assert not canonical.search(shown.stdout + shown.stderr), shown.stdout + shown.stderr
    note = next(line for line in shown.stderr.splitlines() if line.startswith("note: kept "))
    assert note.startswith(
        "note: kept midlayer.self_attn.q_proj, midlayer.self_attn.k_proj, midlayer.self_attn.v_proj unquantized "
        "(one module at run time: vLLM's model.layers.{L}.self_attn.qkv_proj): midlayer.self_attn.k_proj's "
        "out-features 64 is not a multiple of 128"
    ), note
    assert (
        "kept midlayer.self_attn.q_proj.weight: fused with midlayer.self_attn.k_proj: out-features 64" in shown.stdout
    )


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
        shown = _cli(*args[1:], cwd=tmp_path, env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (step, shown.stderr)
    assert shown is not None and shlex.split(steps[-1])[1] == "explain"
    for title in ("vLLM 0.32.0", "SGLang 0.5.23"):  # each engine's table, as the README promises
        assert f"{title}\n" in shown.stdout, shown.stdout
    assert "TensorRT-LLM does not load this checkpoint" in shown.stdout


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
