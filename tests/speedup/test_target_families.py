"""Each family's config priced as its tiny random checkpoint's headers price it, parameters counted against the
transformers model, MoE shapes of the real families, and a config that cannot be priced refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eaglequant.common.errors import InputError
from eaglequant.speedup.target_step import from_config, target_weights

# Tiny configs of each family, built with transformers' own classes (hidden 64, a few layers, four experts).
_ATTENTION = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}
TINY: dict[str, dict[str, Any]] = {
    "llama": {**_ATTENTION, "intermediate_size": 96, "num_hidden_layers": 2, "attention_bias": True},
    "qwen3": {**_ATTENTION, "intermediate_size": 96, "num_hidden_layers": 2, "head_dim": 16,
              "tie_word_embeddings": True},
    "mixtral": {**_ATTENTION, "intermediate_size": 32, "num_hidden_layers": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen3_moe": {**_ATTENTION, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3,
                  "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1]},
    "qwen2_moe": {**_ATTENTION, "intermediate_size": 96, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 48, "num_hidden_layers": 3, "num_experts": 4,
                  "num_experts_per_tok": 2, "decoder_sparse_step": 2},
    "gpt_oss": {**_ATTENTION, "intermediate_size": 32, "num_hidden_layers": 2, "head_dim": 16,
                "num_local_experts": 4, "num_experts_per_tok": 2,
                "layer_types": ["sliding_attention", "full_attention"]},
    "llama4_text": {**_ATTENTION, "intermediate_size": 32, "intermediate_size_mlp": 96, "num_hidden_layers": 4,
                    "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2},
    "glm4_moe": {**_ATTENTION, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3,
                 "head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "attention_bias": True},
    "deepseek_v3": {**_ATTENTION, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
                    "num_hidden_layers": 3, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
                    "qk_rope_head_dim": 8, "v_head_dim": 16, "n_group": 1, "topk_group": 1},
}  # fmt: skip
_ROUTERS = (".mlp.gate.", ".block_sparse_moe.gate.", ".mlp.router.", ".feed_forward.router.")


def _counted(model: Any) -> tuple[int, int]:
    """Parameters of the model's matrices each token runs through, and those of one routed expert (transformers
    stores every layer's experts in one ``experts`` module)."""
    dense, expert, moe_layers, experts = 0, 0, 0, 1
    for name, param in model.named_parameters():
        if param.dim() < 2 or name.endswith("bias") or "embed_tokens" in name:
            continue
        if ".experts." in name:
            expert += param.numel()
            experts = param.shape[0]
            moe_layers += name.endswith(("gate_up_proj", "w1"))
        else:
            dense += param.numel()
    if model.config.tie_word_embeddings:
        dense += model.config.vocab_size * model.config.hidden_size
    return dense, expert // (moe_layers * experts) if moe_layers else 0


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, tuple[int, int]]]:
    """Each family's tiny random checkpoint, written by transformers, and its parameter counts."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    built = {}
    for model_type, sizes in TINY.items():
        config = AutoConfig.for_model(model_type, **sizes)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        path = tmp_path_factory.mktemp(model_type)
        model.save_pretrained(path, safe_serialization=True)
        built[model_type] = (path, _counted(model))
    return built


@pytest.mark.parametrize("model_type", list(TINY))
def test_a_family_priced_from_its_config_equals_its_checkpoints_headers(
    model_type: str, tiny_checkpoints: dict[str, tuple[Path, tuple[int, int]]]
) -> None:
    path, (dense_params, expert_params) = tiny_checkpoints[model_type]
    headers, config = target_weights(path), target_weights(path / "config.json")
    assert (headers.read_from, config.read_from) == ("safetensors headers", "config.json")
    fields = ("dense_bytes", "expert_bytes", "embedding_row_bytes", "moe_layers", "experts", "experts_per_token")
    fields += ("dense_params", "expert_params", "dense_compute", "expert_compute", "kv_bytes_per_position")
    assert {f: getattr(config, f) for f in fields} == {f: getattr(headers, f) for f in fields}
    assert (config.dense_params, config.expert_params) == (dense_params, expert_params)
    assert (config.moe_layers > 0) == (model_type not in ("llama", "qwen3"))


# The public architectures' MoE shapes (config keys as their config.json spell them).
MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
}
GPT_OSS_120B = {
    "model_type": "gpt_oss",
    "architectures": ["GptOssForCausalLM"],
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 128,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    },
}
QWEN3_235B = {
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
}
LLAMA4_MAVERICK = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_local_experts": 128,
    "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 2,
    "vocab_size": 202048,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
    },
}


@pytest.mark.parametrize(
    ("config", "moe_layers", "experts", "top_k", "expert_bytes", "expert_compute"),
    [
        (MIXTRAL_8X7B, 32, 8, 2, 3 * 4096 * 14336 * 2, "bf16"),
        (GPT_OSS_120B, 36, 128, 4, 3 * 2880 * 2880 * 4.25 / 8 + 3 * 2880 * 2, "bf16"),
        (QWEN3_235B, 94, 128, 8, 3 * 4096 * 1536 * 2, "bf16"),
        (LLAMA4_MAVERICK, 24, 128, 1, 3 * 5120 * 8192 * 2, "bf16"),
        (DEEPSEEK_V3, 58, 256, 8, 3 * 7168 * 2048 * (1 + 4 / 128**2), "fp8"),
    ],
    ids=["mixtral", "gpt-oss", "qwen3-moe", "llama4", "deepseek-v3"],
)
def test_each_moe_family_prices_its_experts_by_its_own_keys(
    config: dict[str, Any], moe_layers: int, experts: int, top_k: int, expert_bytes: float, expert_compute: str
) -> None:
    weights = from_config("t", config)
    assert (weights.moe_layers, weights.experts, weights.experts_per_token) == (moe_layers, experts, top_k)
    assert weights.expert_bytes == pytest.approx(expert_bytes, rel=1e-12)
    assert weights.expert_compute == expert_compute


def test_deepseek_v3_fp8_blocks_price_a_byte_and_a_float32_scale_per_block_and_run_in_fp8() -> None:
    bf16 = from_config("t", {**DEEPSEEK_V3, "quantization_config": None})
    fp8 = from_config("t", DEEPSEEK_V3)
    assert fp8.expert_bytes / bf16.expert_bytes == pytest.approx((1 + 4 / 128**2) / 2, rel=1e-12)
    assert (fp8.dense_compute, bf16.dense_compute, fp8.expert_params) == ("fp8", "bf16", 3 * 7168 * 2048)


@pytest.mark.parametrize(
    ("config", "missing"),
    [
        ({**MIXTRAL_8X7B, "intermediate_size": None}, "intermediate_size"),
        ({**QWEN3_235B, "moe_intermediate_size": None}, "moe_intermediate_size"),
        ({**GPT_OSS_120B, "experts_per_token": None}, "num_experts_per_tok or experts_per_token"),
        ({**DEEPSEEK_V3, "n_routed_experts": None}, "n_routed_experts"),
    ],
    ids=["mixtral", "qwen3-moe", "gpt-oss", "deepseek-v3"],
)
def test_a_config_whose_experts_or_mlp_cannot_be_priced_is_refused_naming_the_key(
    config: dict[str, Any], missing: str
) -> None:
    with pytest.raises(InputError, match=f"no {missing}, which prices") as raised:
        from_config("t", config)
    assert "\n" not in str(raised.value)


BERT = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522}  # fmt: skip


def test_a_config_that_is_not_a_decoder_llm_or_an_unread_family_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(BERT))
    with pytest.raises(InputError, match=r"'bert' \(BertForMaskedLM\) is not a decoder LLM"):
        target_weights(tmp_path)
    with pytest.raises(InputError, match="cannot price a target of model_type 'phi3'"):
        from_config("t", {**MIXTRAL_8X7B, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"]})


def test_an_unknown_quant_method_is_refused_not_priced_as_bf16() -> None:
    with pytest.raises(InputError, match="quant_method 'gptq'"):
        from_config("t", {**MIXTRAL_8X7B, "quantization_config": {"quant_method": "gptq", "bits": 4}})


@pytest.mark.parametrize(
    ("config", "total", "active", "embedding_active", "rounded"),
    [(MIXTRAL_8X7B, 46.7, 12.9, True, 0.05), (GPT_OSS_120B, 116.8, 5.1, False, 0.05),
     (QWEN3_235B, 235, 22, True, 0.5), (LLAMA4_MAVERICK, 400, 17, True, 1), (DEEPSEEK_V3, 671, 37, False, 0.5)],
    ids=["mixtral-8x7b", "gpt-oss-120b", "qwen3-235b-a22b", "llama4-maverick", "deepseek-v3"],
)  # fmt: skip
def test_each_family_counts_the_parameters_its_model_card_states(
    config: dict[str, Any], total: float, active: float, embedding_active: bool, rounded: float
) -> None:
    """The total and active parameters each model's card states, in billions, to the card's rounding (DeepSeek-V3:
    its main model, without the MTP module; gpt-oss and DeepSeek-V3 count active parameters without the
    embedding)."""
    weights = from_config("t", config)
    embedding = config["vocab_size"] * config["hidden_size"]
    routed = weights.expert_params * weights.moe_layers
    assert (weights.dense_params + routed * weights.experts + embedding) / 1e9 == pytest.approx(total, abs=rounded)
    per_token = weights.dense_params + routed * weights.experts_per_token + (embedding if embedding_active else 0)
    assert per_token / 1e9 == pytest.approx(active, abs=rounded)
