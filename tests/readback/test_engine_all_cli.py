"""``--engine all`` on the command line: every engine in convert and inspect, every engine listed (and those that
load it judged) in explain and verify; and a recorded source that is gone, named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.as_user import as_user, converted_copy
from tests.conftest import FIXTURES, run_cli_subprocess, write_calibration
from tests.project.test_bad_input import assert_refused


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_copy(tmp_path_factory)


# -- --engine all means every engine in convert and inspect too ----------------------------------------


@pytest.mark.slow
def test_engine_all_in_convert_and_inspect_is_every_engine(tmp_path: Path) -> None:
    from eaglequant.engines import ENGINES

    line = assert_refused(
        as_user("convert", FIXTURES / "specforge-llama", tmp_path / "quark", "--engine", "all"),
        ("TensorRT-LLM cannot load", "--scheme nvfp4 --format modelopt with captured inputs (convert --calib FILE)"),
    )
    assert "unknown engine" not in line
    calib = write_calibration("specforge-llama", tmp_path / "calib.safetensors")
    dst = tmp_path / "every"
    args = ("--engine", "all", "--scheme", "nvfp4", "--format", "modelopt")
    assert_refused(  # inspect has no --calib: nvfp4 is W4A16 there, which TensorRT-LLM 1.2.x does not load
        as_user("inspect", FIXTURES / "specforge-llama", *args),
        ("TensorRT-LLM cannot load nvfp4", "use --format modelopt with captured inputs", "which every engine can load"),
    )
    args = (*args, "--calib", calib)
    converted = as_user("convert", FIXTURES / "specforge-llama", dst, *args, "--json")
    assert converted.exit_code == 0, converted.stderr
    assert json.loads((dst / "eaglequant_report.json").read_text())["engines"] == list(ENGINES)
    unknown = assert_refused(as_user("inspect", FIXTURES / "specforge-llama", "--engine", "bogus"), ("unknown engine",))
    assert "or all" in unknown


# -- explain --engine all says what it judged -------------------------------------------------------------


@pytest.mark.slow
def test_engine_all_lists_every_engine_and_judges_those_that_load_it(converted: Path) -> None:
    """Quark: TensorRT-LLM cannot read it. ``--engine all`` lists it (not judged, said so in the verdict line and
    the JSON); ``--engine trtllm`` requires it (exit 3), in explain and verify alike."""
    every = as_user("explain", converted, "--engine", "all", env={"COLUMNS": "200"})
    assert every.exit_code == 0, every.stdout + every.stderr
    verdict = every.stdout.strip().splitlines()[-1]
    assert "TensorRT-LLM 1.2.x, TensorRT-LLM main (2026) cannot load it" in verdict and "--engine" in verdict
    assert "each engine above applies" not in every.stdout
    data = json.loads(as_user("explain", converted, "--engine", "all", "--json").stdout)
    judged = {e["engine"]: (e["loads"], e["judged"]) for e in data["engines"]}
    assert data["ok"] and judged["trtllm"] == (False, False) and judged["vllm"] == (True, True)
    named = as_user("explain", converted, "--engine", "trtllm", "--json")
    assert named.exit_code == 3 and json.loads(named.stdout)["engines"][0]["judged"] is True
    assert as_user("verify", converted, "--engine", "all", "--tokens", "16").exit_code == 0
    assert as_user("verify", converted, "--engine", "trtllm", "--tokens", "16").exit_code == 3


# -- the recorded source is gone: verify names the path it looked for ----------------------------------


@pytest.mark.slow
def test_verify_names_the_recorded_source_that_is_gone(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "specforge-llama", tmp_path / "src")
    assert run_cli_subprocess("convert", tmp_path / "src", tmp_path / "dst").returncode == 0
    shutil.rmtree(tmp_path / "src")
    human = as_user("verify", tmp_path / "dst", env={"COLUMNS": "300"})
    assert human.exit_code == 5, human.stderr
    assert f"its recorded source, {tmp_path / 'src'}, is gone" in human.stdout, human.stdout
    data = json.loads(as_user("verify", tmp_path / "dst", "--json").stdout)
    assert data["verdict"] == "not verified numerically" and data["recorded_source"] == str(tmp_path / "src")
