"""The target's bytes a forward reads: from headers, from a config, and the distinct experts several tokens route to."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from eaglequant.common.errors import InputError
from eaglequant.speedup.target_step import (
    Header,
    TargetWeights,
    from_config,
    from_headers,
    target_weights,
    weight_bytes,
)

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "fixtures" / "targets" / "kimi-k2.5"


def _weights(**changed: object) -> TargetWeights:
    base = dict(name="t", read_from="test", layers=2, dense_bytes=1000, embedding_row_bytes=10, moe_layers=1,
                experts=4, experts_per_token=2, expert_bytes=100.0, kv_bytes_per_position=4.0,
                kv_replicated=False)  # fmt: skip
    return TargetWeights(**{**base, **changed})  # type: ignore[arg-type]


def test_distinct_experts_is_the_exact_expectation_over_every_routing() -> None:
    weights = _weights()
    for tokens in (1, 2, 3):
        routings = list(itertools.product(itertools.combinations(range(4), 2), repeat=tokens))
        mean = sum(len(set(itertools.chain(*r))) for r in routings) / len(routings)
        assert weights.distinct_experts(tokens) == pytest.approx(mean, rel=1e-12)


def test_a_forward_reads_dense_weights_once_experts_per_token_rows_and_the_cache() -> None:
    weights = _weights(tensor_parallel_size=2)
    # dense 1000 + 1 MoE layer x 3 distinct experts (4 x (1 - 1/4)) x 100 + 2 rows x 10, over 2 ranks; cache split
    assert weights.forward_bytes(2, 5) == pytest.approx((1000 + 300 + 20) / 2 + 5 * 4 / 2)
    assert _weights(kv_replicated=True, tensor_parallel_size=2).forward_bytes(2, 5) == pytest.approx(660 + 20)


def test_headers_split_experts_embedding_and_dense_and_leave_out_the_mtp_layer() -> None:
    config = {"num_hidden_layers": 3, "n_routed_experts": 2, "num_experts_per_tok": 1, "vocab_size": 8,
              "hidden_size": 4, "num_attention_heads": 1}  # fmt: skip
    nbytes = {
        "model.embed_tokens.weight": 64,
        "model.layers.0.mlp.down_proj.weight": 7,
        "model.layers.1.mlp.experts.0.down_proj.weight": 10,
        "model.layers.1.mlp.experts.1.down_proj.weight": 10,
        "model.layers.2.mlp.experts.0.down_proj.weight": 30,
        "model.layers.2.mlp.experts.1.down_proj.weight": 30,
        "model.layers.3.mlp.experts.0.down_proj.weight": 999,  # the multi-token-prediction layer
        "lm_head.weight": 64,
    }
    weights = from_headers("t", config, {name: Header("U8", (size,), size) for name, size in nbytes.items()})
    assert (weights.moe_layers, weights.experts, weights.expert_bytes) == (2, 2, 20.0)
    assert (weights.dense_bytes, weights.embedding_row_bytes) == (71, 8)


def test_a_dense_target_from_its_headers_reads_all_its_bytes_with_a_tied_lm_head() -> None:
    target = ROOT / "fixtures" / "trained-pair" / "target"
    weights = target_weights(target)
    from eaglequant.checkpoint.reader import Checkpoint

    with Checkpoint.open(target, "TARGET") as checkpoint:
        total = sum(info.nbytes for info in checkpoint.tensors.values())
    assert weights.read_from == "safetensors headers"
    assert (weights.moe_layers, weights.dense_bytes) == (0, total)  # tied: the embedding is the lm_head


def test_kimi_from_its_config_prices_int4_experts_and_bf16_attention() -> None:
    config = json.loads((KIMI / "config.json").read_text())["text_config"]
    per_weight = weight_bytes(config)
    assert per_weight("model.layers.9.mlp.experts.0.down_proj") == 0.5 + 2 / 32
    assert per_weight("model.layers.9.self_attn.o_proj") == 2
    assert per_weight("model.layers.9.mlp.shared_experts.down_proj") == 2
    assert per_weight("lm_head") == 2
    weights = from_config("kimi", config)
    assert (weights.moe_layers, weights.experts, weights.experts_per_token) == (60, 384, 8)
    assert weights.expert_bytes == 3 * 7168 * 2048 * 0.5625
    assert weights.kv_bytes_per_position == 61 * 576 * 2 and weights.kv_replicated
    assert weights.distinct_experts(4) == pytest.approx(31.0, abs=0.05)  # a k = 3 verification


def test_kimi_at_tp_8_reads_about_4_gb_a_step_and_twice_that_to_verify_four_tokens() -> None:
    weights = target_weights(KIMI, 8)
    assert weights.read_from == "config.json"
    assert weights.step_bytes / 1e9 == pytest.approx(4.12, abs=0.01)
    assert weights.forward_bytes(4, 0) / weights.step_bytes == pytest.approx(2.04, abs=0.01)


def test_a_config_without_sizes_and_a_missing_target_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no hidden_size"):
        from_config("t", {"model_type": "x"})
    with pytest.raises(InputError, match=r"no config\.json"):
        target_weights(tmp_path)
    with pytest.raises(InputError, match="at least 1"):
        _weights().on(0)


def test_quantized_headers_count_packed_weights_not_scales_and_take_their_compute_from_the_config() -> None:
    config = {
        "num_hidden_layers": 1,
        "n_routed_experts": 2,
        "num_experts_per_tok": 1,
        "vocab_size": 8,
        "hidden_size": 64,
        "num_attention_heads": 1,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "ignore": ["re:.*self_attn.*"],
            "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 32}}},
        },
    }
    headers = {
        "model.embed_tokens.weight": Header("BF16", (8, 64), 8 * 64 * 2),
        "model.layers.0.self_attn.o_proj.weight": Header("BF16", (64, 64), 64 * 64 * 2),
        "model.layers.0.input_layernorm.weight": Header("BF16", (64,), 128),
        "lm_head.weight": Header("BF16", (8, 64), 8 * 64 * 2),
    }
    for expert in (0, 1):  # INT4 packed eight to an int32, a BF16 scale per 32, the shape as int64
        prefix = f"model.layers.0.mlp.experts.{expert}.down_proj"
        headers[f"{prefix}.weight_packed"] = Header("I32", (64, 8), 64 * 8 * 4)
        headers[f"{prefix}.weight_scale"] = Header("BF16", (64, 2), 64 * 2 * 2)
        headers[f"{prefix}.weight_shape"] = Header("I64", (2,), 16)
    weights = from_headers("t", config, headers)
    assert (weights.expert_params, weights.expert_bytes, weights.expert_compute) == (64 * 64, 2048 + 256 + 16, "bf16")
    assert (weights.dense_params, weights.dense_bytes) == (64 * 64 + 8 * 64, 8192 + 128 + 1024)
    assert weights.embedding_row_bytes == 128
