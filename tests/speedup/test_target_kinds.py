"""A target's own quantization priced through the formats' and vLLM's matching rules: Kimi-K2.5 in Quark MXFP4
and ModelOpt NVFP4, compressed-tensors groups with targets and ignore as vLLM matches them, Quark layer configs,
ModelOpt's hf_quant_config.json, and what cannot be priced refused."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eaglequant.common.errors import InputError
from eaglequant.speedup.target_kinds import target_storage
from eaglequant.speedup.target_step import from_config, target_weights

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"


def _text(name: str) -> dict[str, Any]:
    return json.loads((TARGETS / name / "config.json").read_text())["text_config"]


def _bf16() -> dict[str, Any]:
    return {key: value for key, value in _text("kimi-k2.5").items() if key != "quantization_config"}


@pytest.mark.parametrize(
    ("name", "ratio", "compute"),
    [
        ("kimi-k2.5-mxfp4", 4.25 / 16, "fp4"),
        ("kimi-k2.5-nvfp4", (4 + 8 / 16) / 16, "fp4"),
        ("kimi-k2.5", 4.5 / 16, "bf16"),
    ],
)
def test_kimi_prices_its_experts_at_its_own_formats_bytes_and_the_rest_as_bf16(
    name: str, ratio: float, compute: str
) -> None:
    bf16 = from_config("bf16", _bf16())
    weights = target_weights(TARGETS / name)
    assert weights.expert_bytes / bf16.expert_bytes == pytest.approx(ratio, rel=1e-12)
    assert (weights.dense_bytes, weights.dense_params, weights.expert_params) == (
        bf16.dense_bytes,
        bf16.dense_params,
        bf16.expert_params,
    )
    assert (weights.expert_compute, weights.dense_compute) == (compute, "bf16")


def test_modelopt_is_read_from_hf_quant_config_json_alone(tmp_path: Path) -> None:
    shutil.copy(TARGETS / "kimi-k2.5-nvfp4" / "hf_quant_config.json", tmp_path)
    config = json.loads((TARGETS / "kimi-k2.5-nvfp4" / "config.json").read_text())
    del config["text_config"]["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    both = (target_weights(tmp_path), target_weights(TARGETS / "kimi-k2.5-nvfp4"))
    assert replace(both[0], name="kimi") == replace(both[1], name="kimi")
    assert both[0].expert_compute == "fp4"


def _ct(groups: dict[str, Any], ignore: list[str]) -> dict[str, Any]:
    return {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                    "config_groups": groups, "ignore": ignore}}  # fmt: skip


_INT4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}
_FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
_FP8_INPUTS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}


def test_compressed_tensors_reads_every_group_with_its_targets() -> None:
    groups = {
        "experts": {"targets": [r"re:.*mlp\.experts\..*"], "weights": _INT4, "format": "pack-quantized"},
        "rest": {"targets": ["Linear"], "weights": _FP8, "input_activations": _FP8_INPUTS, "format": "float-quantized"},
    }
    stored = target_storage(_ct(groups, []))
    assert stored("model.layers.3.mlp.experts.7.down_proj", True).bytes_per_weight == 0.5 + 2 / 32
    assert stored("model.layers.3.mlp.experts.7.down_proj", True).compute == "bf16"
    assert stored("model.layers.3.self_attn.o_proj", False).bytes_per_weight == 1.0
    assert stored("model.layers.3.self_attn.o_proj", False).compute == "fp8"
    # The order of the groups does not decide it: a group naming the module wins over Linear.
    reordered = target_storage(_ct({"rest": groups["rest"], "experts": groups["experts"]}, []))
    assert reordered("model.layers.3.mlp.experts.7.down_proj", True).bytes_per_weight == 0.5 + 2 / 32


def test_compressed_tensors_ignore_is_matched_as_vllm_matches_it() -> None:
    groups = {"group_0": {"targets": ["Linear"], "weights": _INT4}}
    # exact names, or re: + re.match anchored at the start: a bare suffix or an unanchored pattern excludes nothing
    stored = target_storage(_ct(groups, ["o_proj", "re:self_attn", "model.layers.1.self_attn.q_proj", "re:.*kv_b"]))
    assert stored("model.layers.1.self_attn.o_proj", False).bytes_per_weight == 0.5 + 2 / 32
    assert stored("model.layers.1.self_attn.q_proj", False).bytes_per_weight == 2
    assert stored("model.layers.1.self_attn.kv_b_proj", False).bytes_per_weight == 2  # re.match, not fullmatch


def test_quark_reads_a_layers_own_config_before_the_global_one() -> None:
    fp8 = {"dtype": "fp8_e4m3", "qscheme": "per_channel", "ch_axis": 0, "is_dynamic": False}
    mxfp4 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
    quant = {"quant_method": "quark", "global_quant_config": {"weight": mxfp4, "input_tensors": None},
             "layer_quant_config": {"*shared_experts*": {"weight": fp8, "input_tensors": {**fp8, "is_dynamic": True}}},
             "exclude": ["re:.*self_attn.*"]}  # fmt: skip
    stored = target_storage({"quantization_config": quant})
    assert stored("model.layers.2.mlp.experts.1.up_proj", True) == stored("model.layers.2.mlp.gate_proj", False)
    assert stored("model.layers.2.mlp.experts.1.up_proj", True).bytes_per_weight == 0.5 + 1 / 32
    assert stored("model.layers.2.mlp.shared_experts.up_proj", False).compute == "fp8"
    assert stored("model.layers.2.self_attn.o_proj", False).bytes_per_weight == 2


@pytest.mark.parametrize(
    ("quant", "said"),
    [
        ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "int4", "qscheme": "per_group"}}},
         "dtype 'int4'"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo 'W4A8_AWQ'"),
        ({"quant_method": "awq", "bits": 4}, "quant_method 'awq'"),
    ],
)  # fmt: skip
def test_a_quantization_eaglequant_cannot_price_is_one_line(quant: dict[str, Any], said: str) -> None:
    with pytest.raises(InputError, match=said) as raised:
        from_config("t", {**_bf16(), "quantization_config": quant})
    assert "\n" not in str(raised.value)
