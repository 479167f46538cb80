"""Bit-exactness against amd-quark's own file-to-file ptpc_fp8 export, on every fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from eaglequant import convert
from eaglequant.engines.vllm import VllmEngine
from eaglequant.layouts.head import HeadDescription
from tests.conftest import FIXTURE_NAMES, FIXTURES

pytestmark = pytest.mark.vendor


def _tensor_bytes(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    out = {}
    files = sorted(path.glob("*.safetensors"))
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                tensor = handle.get_tensor(name)
                raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                out[name] = (str(tensor.dtype), list(tensor.shape), raw)
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("eaglequant")
    return {name: convert(FIXTURES / name, work / name).destination for name in FIXTURE_NAMES}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_tensor_is_byte_identical_to_quark(name: str, quark_outputs: dict[str, Path], converted) -> None:
    ours = _tensor_bytes(converted[name])
    theirs = _tensor_bytes(quark_outputs[name])
    assert sorted(ours) == sorted(theirs)
    quantized = [n for n in ours if n.endswith(".weight_scale")]
    assert quantized, "the fixture must have quantized linears"
    for tensor_name in sorted(ours):
        assert ours[tensor_name][:2] == theirs[tensor_name][:2], tensor_name
        assert ours[tensor_name][2] == theirs[tensor_name][2], f"{tensor_name} differs from amd-quark"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_quantization_config_matches_quark_except_exclude(name: str, quark_outputs, converted) -> None:
    ours = json.loads((converted[name] / "config.json").read_text())["quantization_config"]
    theirs = json.loads((quark_outputs[name] / "config.json").read_text())["quantization_config"]
    assert {k: v for k, v in ours.items() if k != "exclude"} == {k: v for k, v in theirs.items() if k != "exclude"}
    # Quark writes checkpoint names, which vLLM never sees: `fc` leaves model.fc quantized.
    assert "fc" in theirs["exclude"]
    assert "fc" not in ours["exclude"]


def test_quark_own_exclude_is_the_trap(quark_outputs) -> None:
    """The reason eaglequant rewrites `exclude`: vLLM's rule applied to Quark's list quantizes model.fc."""
    exclude = json.loads((quark_outputs["specforge-llama"] / "config.json").read_text())["quantization_config"][
        "exclude"
    ]
    assert VllmEngine().matching_rule("quark", "model.fc", exclude) is None


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_vllm_quantizes_exactly_the_decoder_linears(name: str, converted) -> None:
    from eaglequant.api import inspect

    head: HeadDescription = inspect(FIXTURES / name).head
    exclude = json.loads((converted[name] / "config.json").read_text())["quantization_config"]["exclude"]
    engine = VllmEngine()
    for target_layers in (1, 61, 94):
        quantized = set()
        for module in engine.runtime_modules(head, target_layers):
            decisions = {engine.matching_rule("quark", n, exclude) is None for n in module.names}
            assert len(decisions) == 1, f"spellings of {module.names} disagree"
            if module.quantizable and decisions.pop():
                quantized.update(module.members)
        assert quantized == {lin.module for lin in head.decoder_linears}
