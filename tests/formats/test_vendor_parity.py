"""Bit-exactness against the vendor libraries, on every fixture and every scheme a format stores.

Each vendor runs once per session in a subprocess (conftest), on the same source and with the same
linears excluded as eaglequant chose; every output tensor must then be byte-identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.checkpoint.reader import tensor_bytes as tensor_bytes_of
from eaglequant.engines.vllm import VllmEngine
from eaglequant.formats import FORMATS, GroupScales
from tests.conftest import (
    FIXTURES,
    INT_EDGE_DTYPES,
    INT_EDGE_PRESETS,
    ParityCase,
    fused_groups_file,
    int_edge_tensors,
    parity_cases,
)

pytestmark = pytest.mark.vendor


def tensor_bytes(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """name -> (dtype, shape, raw bytes) over every .safetensors file in ``path`` (or that one file)."""
    out = {}
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                tensor = handle.get_tensor(name)
                raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                out[name] = (str(tensor.dtype), list(tensor.shape), raw)
    return out


def assert_identical(ours: dict, theirs: dict, vendor: str) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in sorted(ours):
        assert ours[name][:2] == theirs[name][:2], name
        assert ours[name][2] == theirs[name][2], f"{name} differs from {vendor}"


def quantization_config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())["quantization_config"]


# -- AMD Quark -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", parity_cases("quark"), ids=str)
def test_quark_tensors_are_byte_identical(case: ParityCase, quark_outputs, converted) -> None:
    result = converted[case]
    assert result.linears, "the fixture must have quantized linears"
    assert_identical(tensor_bytes(result.destination), tensor_bytes(quark_outputs[case]), "amd-quark")


@pytest.mark.parametrize("case", parity_cases("quark"), ids=str)
def test_quark_config_matches_except_exclude(case: ParityCase, quark_outputs, converted) -> None:
    ours = quantization_config(converted[case].destination)
    theirs = quantization_config(quark_outputs[case])
    assert {k: v for k, v in ours.items() if k != "exclude"} == {k: v for k, v in theirs.items() if k != "exclude"}
    # Quark writes checkpoint names, which vLLM never sees: `fc` leaves model.fc quantized.
    assert "fc" in theirs["exclude"] and "fc" not in ours["exclude"]


def test_quark_own_exclude_is_the_trap(quark_outputs) -> None:
    """The reason eaglequant rewrites `exclude`: vLLM's rule applied to Quark's list quantizes model.fc."""
    exclude = quantization_config(quark_outputs[ParityCase("specforge-llama", "quark", "fp8-per-channel")])["exclude"]
    assert VllmEngine().matching_rule(FORMATS["quark"], "model.fc", exclude) is None


# -- compressed-tensors / llm-compressor ---------------------------------------------------------


@pytest.mark.parametrize("case", parity_cases("compressed-tensors"), ids=str)
def test_compressed_tensors_are_byte_identical(case: ParityCase, llmcompressor_outputs, converted) -> None:
    result = converted[case]
    assert result.linears, "the fixture must have quantized linears"
    ours = tensor_bytes(result.destination)
    theirs = tensor_bytes(llmcompressor_outputs[case])
    groups = fused_groups_file(llmcompressor_outputs[case])
    if groups.exists():
        # MLA q_a + kv_a: vLLM fuses them, so they share one global scale; model_free_ptq does not
        # group them, compressed-tensors' own observer over the pair is the reference.
        fused = tensor_bytes(groups)
        assert fused and set(fused) <= set(theirs)
        theirs.update(fused)
    assert_identical(ours, theirs, "llm-compressor")


@pytest.mark.parametrize("case", parity_cases("compressed-tensors"), ids=str)
def test_compressed_tensors_config_matches_except_ignore(case: ParityCase, llmcompressor_outputs, converted) -> None:
    ours = quantization_config(converted[case].destination)
    theirs = quantization_config(llmcompressor_outputs[case])
    assert {k: v for k, v in ours.items() if k != "ignore"} == {k: v for k, v in theirs.items() if k != "ignore"}


@pytest.mark.parametrize("scheme", list(INT_EDGE_PRESETS))
@pytest.mark.parametrize("dtype_name", INT_EDGE_DTYPES)
def test_integer_edges_are_byte_identical(dtype_name: str, scheme: str, llmcompressor_outputs) -> None:
    """eaglequant's recipe on llm-compressor's own edge cases: zero rows and groups, constant, all-negative and
    all-positive groups, ties, tiny and large rows, in bf16, fp16 and fp32."""
    from eaglequant.checkpoint.dtypes import from_torch
    from eaglequant.formats import get_format
    from eaglequant.layouts.head import HeadLinear
    from eaglequant.schemes.model import load_scheme

    theirs = tensor_bytes(llmcompressor_outputs[f"int-edges-{dtype_name}-{scheme}"])
    fmt, scheme_obj = get_format("compressed-tensors"), load_scheme(scheme)
    ours: dict[str, tuple[str, list[int], bytes]] = {}
    for name, weight in int_edge_tensors(dtype_name).items():
        module = name.removesuffix(".weight")
        n, k = weight.shape
        linear = HeadLinear(module, name, module.rsplit(".", 1)[1], 0, n, k, from_torch(weight.dtype))
        for key, tensor in fmt.quantized_tensors(linear, weight, scheme_obj, GroupScales()).items():
            raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            ours[key] = (str(tensor.dtype), list(tensor.shape), raw)
    assert ours and set(ours) <= set(theirs)
    assert_identical(ours, {name: theirs[name] for name in ours}, "llm-compressor")


# -- NVIDIA ModelOpt -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", parity_cases("modelopt"), ids=str)
def test_modelopt_quantized_tensors_are_byte_identical(case: ParityCase, modelopt_outputs, converted) -> None:
    result = converted[case]
    assert result.linears, "the fixture must have quantized linears"
    ours = tensor_bytes(result.destination)
    theirs = tensor_bytes(modelopt_outputs[case])
    quantized_modules = {lin.checkpoint_module for lin in result.plan.quantized}
    ours_quantized = {n: v for n, v in ours.items() if n.rsplit(".", 1)[0] in quantized_modules}
    assert_identical(ours_quantized, theirs, "nvidia-modelopt")
    # Everything else is the source's tensors, unchanged.
    with Checkpoint.open(FIXTURES / case.fixture) as source:
        for name, value in ours.items():
            if name not in ours_quantized:
                assert value[2] == bytes(tensor_bytes_of(source.read(name))), name
