"""A module the engine refuses, stored quantized and not excluded by the config, is read as the engine reads it:
``explain`` and ``verify`` say the engine cannot load it (``cannot-load``), naming the module and the engine source,
where they used to read it as quantized in its scheme.

The checkpoint is what a tool that does not know vLLM's refusal writes: the bundled awkward head (hidden size 64)
in INT4 W4A16, its fused qkv_proj (128 in-features, one whole group) quantized. vLLM's Llama draft first builds a
base qkv_proj for the hidden size at the same name, whose 64 in-features are no whole group of 128, so vLLM's
integer weight-only method refuses it (``engines/vllm.py::_base_qkv_refusal``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglequant.common.errors import EXIT_CHECK_FAILED
from tests.conftest import FIXTURES, run_cli

AWKWARD = FIXTURES / "awkward-fp32"
QKV = "model.layers.{L}.self_attn.qkv_proj"
SOURCE = "compressed_tensors_wNa16.py::create_weights"


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from eaglequant import convert
    from eaglequant.engines import vllm

    dst = tmp_path_factory.mktemp("refused") / "int4"
    with pytest.MonkeyPatch.context() as patch:  # the writer of another tool: it does not know the refusal
        patch.setattr(vllm, "_base_qkv_refusal", lambda *_: None)
        written = convert(AWKWARD, dst, scheme="int4-w4a16", format="compressed-tensors", engines=["vllm"])
    assert {linear.module for linear in written.report().quantized} >= {"midlayer.self_attn.q_proj"}
    return dst


def _cannot_load(problems: list[dict[str, str]]) -> list[dict[str, str]]:
    return [p for p in problems if p["code"] == "cannot-load"]


def test_explain_says_vllm_cannot_load_the_refused_module(refused: Path) -> None:
    result = run_cli("explain", refused, "--engine", "vllm", "--json")
    assert result.exit_code == EXIT_CHECK_FAILED, result.stdout
    found = _cannot_load(json.loads(result.stdout)["problems"])
    assert [p["subject"] for p in found] == [QKV], found
    assert "vLLM 0.32.0 cannot load it" in found[0]["message"] and SOURCE in found[0]["message"]
    shown = run_cli("explain", refused, "--engine", "vllm")
    assert f"{QKV}: vLLM 0.32.0 cannot load it" in shown.stdout and SOURCE in shown.stdout


def test_verify_says_vllm_cannot_load_the_refused_module(refused: Path) -> None:
    result = run_cli("verify", refused, "--source", AWKWARD, "--engine", "vllm", "--json")
    assert result.exit_code == EXIT_CHECK_FAILED, result.stdout
    found = _cannot_load(json.loads(result.stdout)["problems"])
    assert [p["subject"] for p in found] == [QKV] and SOURCE in found[0]["message"], found


def test_an_engine_that_loads_it_finds_no_problem_with_the_module(refused: Path) -> None:
    """The refusal is vLLM's: the same module read with the refusal lifted (what the writer assumed) is fine."""
    from eaglequant.engines import vllm

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vllm, "_base_qkv_refusal", lambda *_: None)
        result = run_cli("explain", refused, "--engine", "vllm", "--json")
    assert result.exit_code == 0 and not _cannot_load(json.loads(result.stdout)["problems"]), result.stdout
