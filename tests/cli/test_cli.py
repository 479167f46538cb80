"""The command line as a user drives it: fast help, JSON on stdout, messages on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_NAMES, FIXTURES, ROOT, run_cli, run_cli_subprocess


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom eaglequant.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'triton', 'quark', 'modelopt', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_inspect_does_not_import_torch_for_safetensors() -> None:
    code = (
        "import sys\nimport eaglequant\n"
        f"eaglequant.inspect({str(FIXTURES / 'sharded-split')!r})\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_version_and_module_entry_point() -> None:
    proc = run_cli_subprocess("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("eaglequant ")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_inspect_json(name: str) -> None:
    result = run_cli("inspect", FIXTURES / name, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["layout"] and data["reason"] and data["tensors"]
    row = next(r for r in data["tensors"] if r["name"] == "fc.weight")
    assert row["action"] == "keep" and row["reason"].startswith("default")
    assert all({"name", "dtype", "shape", "bytes", "file", "action", "reason"} <= set(r) for r in data["tensors"])


def test_inspect_human_output_goes_to_stdout() -> None:
    result = run_cli("inspect", FIXTURES / "specforge-llama")
    assert result.exit_code == 0 and result.stderr == ""
    assert "specforge-llama" in result.stdout and "midlayer.self_attn.q_proj.weight" in result.stdout


def test_convert_json_only_json_on_stdout(tmp_path: Path) -> None:
    proc = run_cli_subprocess("convert", FIXTURES / "torchspec-mla", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "quark" and data["scheme"] == "fp8-per-channel"
    written = json.loads((tmp_path / "out" / "eaglequant_report.json").read_text())
    assert list(data) == [*written, "seconds"]  # the report, and how long the conversion took (not in the file)
    assert "\r" not in proc.stderr  # no progress bar when stderr is not a terminal


def test_schemes_lists_builtin_files() -> None:
    result = run_cli("schemes", "--json")
    rows = json.loads(result.stdout)["schemes"]
    assert {r["name"] for r in rows} == {p.stem for p in (ROOT / "schemes").glob("*.toml")}
    formats = next(r for r in rows if r["name"] == "fp8-per-channel")["formats"]
    assert [f["format"] for f in formats] == ["quark", "modelopt", "compressed-tensors"]


def test_convert_human_output_names_each_kept_linear_and_why(tmp_path: Path) -> None:
    result = run_cli("convert", FIXTURES / "specforge-llama", tmp_path / "out", "--exclude", "midlayer.mlp.*")
    assert result.exit_code == 0
    assert "kept midlayer.mlp.gate_proj.weight: --exclude midlayer.mlp.*" in result.stdout
    assert "kept fc.weight: default" in result.stdout
    assert "kept norm.weight" not in result.stdout  # only linears are listed
    assert "kept: " not in result.stdout  # "kept lm_head.weight: kept: ..." said it twice


MXFP4 = ("--scheme", "mxfp4")
PAIR = FIXTURES / "trained-pair"


def test_every_command_gives_one_json_result_on_stdout(tmp_path: Path) -> None:
    """--json: stdout holds exactly one JSON document; messages stay on stderr."""
    src = FIXTURES / "specforge-llama"
    dst = tmp_path / "out"
    jobs, bench = tmp_path / "jobs.toml", tmp_path / "b"
    jobs.write_text(f'[[job]]\nsource = "{src}"\ndestination = "batch-out"\nverify = false\n')
    commands = {
        "inspect": ["inspect", src],
        "convert": ["convert", src, dst],
        "explain": ["explain", dst],
        "verify": ["verify", dst],
        "upload": ["upload", dst, "org/name", "--dry-run"],
        "batch": ["batch", jobs, "--summary", tmp_path / "summary.json"],
        "batch-merge": ["batch-merge", tmp_path / "summary.json"],  # the summary batch just wrote
        "schemes": ["schemes"],
        # accept needs an engine (tests/measurement/test_acceptance_engine.py); here its JSON error is the one document
        "accept": ["accept", dst, "--target", tmp_path / "no-target"],
        "capture": [
            "capture",
            tmp_path / "captured.safetensors",
            "--target",
            PAIR / "target",
            "--draft",
            PAIR / "draft",
            "--max-prompts",
            "1",
            "--max-tokens",
            "4",
        ],
        "prune": [
            "prune",
            PAIR / "draft",
            tmp_path / "pruned",
            "--size",
            "8",
            "--counts",
            tmp_path / "captured.safetensors",
        ],
        "search": [
            *("search", PAIR / "draft", tmp_path / "searched", "--inputs", tmp_path / "captured.safetensors"),
            *("--max-acceptance-drop", "1", "--rule", "point", "--scheme", "fp8-per-channel"),
        ],
        "bench kernels": ["bench", "kernels", "--device", "cpu", "--tiny", "--m", "1"],
        "bench convert": ["bench", "convert", "--head", "tiny", "--no-anchors", "--cache-dir", bench, *MXFP4],
    }
    from eaglequant.cli import app

    listed = {c.name for c in app.registered_commands} | {
        f"bench {c.name}" for g in app.registered_groups for c in g.typer_instance.registered_commands
    }
    assert set(commands) == listed - {"bench"}  # a new command must be added here
    for name, args in commands.items():
        result = run_cli(*args, "--json")
        assert result.exit_code == (2 if name == "accept" else 0), (name, result.stderr)
        assert json.loads(result.stdout), name  # one document: json.loads refuses anything more


def test_the_cli_package_exports_its_app_and_the_console_entry_point_pyproject_names() -> None:
    import eaglequant.cli
    from eaglequant.common.toml import loads

    scripts = loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"eaglequant": "eaglequant.cli:entry"}
    assert sorted(eaglequant.cli.__all__) == ["app", "entry", "main"]
    assert all(callable(getattr(eaglequant.cli, name)) for name in eaglequant.cli.__all__)
