"""The target's weight bytes a decode forward reads, per tensor-parallel rank: from its safetensors headers where
its weights are at hand, else from its ``config.json`` alone (Llama-family dense and DeepSeek-V3-family MoE
targets, Kimi-K2.5's text model among them).

A forward over ``n`` tokens at batch 1 reads every dense weight once, one embedding row a token, the KV cache of
the context once, and, in each MoE layer, every routed expert that one of the ``n`` tokens is routed to. With each
token routed to ``top_k`` of ``E`` experts independently and uniformly, the expected number of distinct experts is
``E (1 - (1 - top_k / E) ** n)``: 8 for one token of Kimi-K2.5 (8 of 384), 30.8 for the 4 tokens a k = 3
verification scores. Tensor parallelism splits every weight across ranks (vLLM shards each expert, it does not
place whole experts on ranks without expert parallelism), and the embedding by vocabulary; an MLA cache is the same
latent on every rank, a GQA cache is split by KV head.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.engines.served_length import text_config
from eaglequant.readback.cost import SERVING_WEIGHT_BYTES

_EXPERT = re.compile(r"\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.")
_FUSED_EXPERTS = re.compile(r"\.(?:mlp|block_sparse_moe)\.experts\.[a-z_]+(?:_proj|_blocks|_scales)?$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class TargetWeights(JsonRecord):
    """What a decode forward of the target reads, in bytes per tensor-parallel rank."""

    json_computed = ("step_bytes",)
    json_values = named(expert_bytes=rounded(0), kv_bytes_per_position=rounded(0))

    name: str
    read_from: str  # "safetensors headers" or "config.json"
    layers: int  # decoder layers a forward runs
    dense_bytes: int  # every weight a forward reads whatever the tokens (all ranks together)
    embedding_row_bytes: int
    moe_layers: int
    experts: int  # routed experts in each MoE layer
    experts_per_token: int
    expert_bytes: float  # one routed expert, all ranks together
    kv_bytes_per_position: float  # the cache a forward reads for each token of context, all layers
    kv_replicated: bool  # MLA: every rank holds the whole latent cache
    tensor_parallel_size: int = 1
    # What a forward computes: 2 x params x tokens multiply-adds, at the hardware's peak for the kind they run in.
    # weights each token is multiplied through (attention, dense MLPs, shared experts, router, lm_head)
    dense_params: int = 0
    expert_params: int = 0  # the weights of one routed expert
    dense_compute: str = "bf16"  # the kind dense GEMMs run in: bf16, fp8, int8 or fp4
    expert_compute: str = "bf16"  # the kind routed experts' GEMMs run in

    expert_parallel_size: int = 1  # ranks routed experts are placed whole on (1: sharded by tensor parallelism)

    def distinct_experts(self, tokens: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The expected distinct routed experts one MoE layer reads for ``sequences`` sequences of ``tokens``
        consecutive tokens each. Routing locality ``locality`` (rho in [0, 1]): each token after a sequence's first
        routes as its predecessor did with chance rho, else afresh, so a sequence routes like ``1 + (1 - rho)
        (tokens - 1)`` independent tokens (rho = 0: every token independent, the bound; rho = 1: a sequence's tokens
        share their experts); independent tokens route uniformly, ``E (1 - (1 - top_k / E) ** n)`` for n of them."""
        if not self.experts:
            return 0.0
        independent = sequences * (1.0 + (1.0 - locality) * (tokens - 1))
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** independent)

    def rank_experts(self, tokens: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The routed experts of one MoE layer the busiest rank reads, in whole experts' worth: the distinct ones
        over the tensor-parallel ranks (each expert sharded across them), or, with expert parallelism, the busiest
        rank's share of its ``E / EP`` experts (binomial: its mean plus ``sqrt(2 ln EP)`` standard deviations,
        the expected maximum of EP ranks, at most all of them)."""
        distinct = self.distinct_experts(tokens, sequences, locality)
        ep = self.expert_parallel_size
        if ep <= 1 or not self.experts:
            return distinct / self.tensor_parallel_size
        placed, active = self.experts / ep, distinct / self.experts
        spread = math.sqrt(placed * active * (1.0 - active) * 2.0 * math.log(ep))
        return min(placed, placed * active + spread)

    def forward_bytes(self, tokens: int, context: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The bytes the busiest rank reads in a forward over ``tokens`` tokens of each of ``sequences`` sequences,
        each after ``context`` tokens of context: the dense weights once, the routed experts the tokens activate
        (:meth:`rank_experts`), an embedding row a token and each sequence's cache."""
        tp = self.tensor_parallel_size
        experts = self.moe_layers * self.rank_experts(tokens, sequences, locality) * self.expert_bytes
        rows = tokens * sequences * self.embedding_row_bytes
        cache = sequences * context * self.kv_bytes_per_position
        return (self.dense_bytes + rows) / tp + experts + (cache if self.kv_replicated else cache / tp)

    @property
    def step_bytes(self) -> float:
        """One decode step's weights and embedding row on one rank (no cache)."""
        return self.forward_bytes(1, 0)

    def on(self, tensor_parallel_size: int, expert_parallel_size: int = 1) -> TargetWeights:
        """The same target served on ``tensor_parallel_size`` ranks, its routed experts placed whole on
        ``expert_parallel_size`` of them (1: sharded by tensor parallelism, vLLM's default)."""
        if tensor_parallel_size < 1:
            raise InputError(words(given("tensor_parallel_size", tensor_parallel_size), ": must be at least 1"))
        if expert_parallel_size < 1 or (self.experts and self.experts % expert_parallel_size):
            raise InputError(
                words(given("expert_parallel_size", expert_parallel_size), f": must divide the {self.experts} experts"),
                hint="expert parallelism places whole experts on each rank",
            )
        changed = {"tensor_parallel_size": tensor_parallel_size, "expert_parallel_size": expert_parallel_size}
        return TargetWeights(**{**self.__dict__, **changed})


def target_weights(target: Path, tensor_parallel_size: int = 1) -> TargetWeights:
    """The target at ``target`` (a checkpoint directory, or a ``config.json``): its safetensors headers where its
    weights are there, else its config alone."""
    from eaglequant.checkpoint.reader import Checkpoint, load_json_object

    config_path = target if target.is_file() else target / "config.json"
    if not config_path.is_file():
        raise InputError(
            words(given("target", str(target)), ": no config.json"),
            hint="give the target's checkpoint directory or its config.json",
        )
    config = text_config(load_json_object(config_path, "config.json"))
    has_weights = target.is_dir() and any(target.glob("*.safetensors"))
    if has_weights:
        with Checkpoint.open(target, "TARGET") as checkpoint:
            weights = from_headers(target.name, config, {n: i.nbytes for n, i in checkpoint.tensors.items()})
    else:
        weights = from_config(config_path.parent.name or str(target), config)
    return weights.on(tensor_parallel_size)


def _int(config: dict[str, Any], key: str, default: int = 0) -> int:
    value = config.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def kv_bytes_per_position(config: dict[str, Any]) -> tuple[float, bool]:
    """The KV cache of one context position over all layers, and whether it is the same on every rank (MLA); the
    cache is held in the serving dtype, as an unquantized weight is (vLLM's ``kv_cache_dtype="auto"``)."""
    layers = _int(config, "num_hidden_layers")
    if _int(config, "kv_lora_rank"):
        latent = _int(config, "kv_lora_rank") + _int(config, "qk_rope_head_dim")
        return float(layers * latent * SERVING_WEIGHT_BYTES), True
    heads = _int(config, "num_attention_heads", 1)
    head_dim = _int(config, "head_dim") or _int(config, "hidden_size") // max(heads, 1)
    kv_heads = _int(config, "num_key_value_heads", heads)
    return float(layers * 2 * kv_heads * head_dim * SERVING_WEIGHT_BYTES), False


def _moe_shape(config: dict[str, Any]) -> tuple[int, int]:
    experts = _int(config, "n_routed_experts") or _int(config, "num_local_experts") or _int(config, "num_experts")
    return experts, _int(config, "num_experts_per_tok")


def from_headers(name: str, config: dict[str, Any], nbytes: dict[str, int]) -> TargetWeights:
    """Bytes from the tensors' headers: routed experts (``mlp.experts.N.``, or fused ``mlp.experts.*`` holding
    every expert), the embedding, and everything else dense. Layers past ``num_hidden_layers`` (DeepSeek's
    multi-token-prediction layer) are not read by a decode step and are left out."""
    layers = _int(config, "num_hidden_layers")
    experts, top_k = _moe_shape(config)
    dense, expert_total, embedding = 0, 0, 0
    moe_layers: set[int] = set()
    for tensor, size in nbytes.items():
        layer = _LAYER.search(tensor)
        if layer is not None and layers and int(layer.group(1)) >= layers:
            continue
        if experts and (_EXPERT.search(tensor) or _FUSED_EXPERTS.search(tensor)):
            expert_total += size
            if layer is not None:
                moe_layers.add(int(layer.group(1)))
        elif tensor.endswith("embed_tokens.weight"):
            embedding += size
        else:
            dense += size
    vocab = _int(config, "vocab_size", 1)
    kv, replicated = kv_bytes_per_position(config)
    count = len(moe_layers)
    per_expert = expert_total / (count * experts) if count and experts else 0.0
    if config.get("tie_word_embeddings") and not any(t.endswith("lm_head.weight") for t in nbytes):
        dense += embedding  # a tied lm_head reads the whole embedding every forward
    experts, top_k = (experts, top_k) if count else (0, 0)
    row = embedding // max(vocab, 1)
    found = (count, experts, top_k, per_expert)
    return TargetWeights(name, "safetensors headers", layers, dense, row, *found, kv, replicated)


def from_config(name: str, config: dict[str, Any]) -> TargetWeights:
    """Bytes from ``config.json`` alone: parameter counts of the Llama family (dense) or the DeepSeek-V3 family
    (MLA attention, a few dense layers, then MoE layers of routed and shared experts), each weight at the bytes its
    ``quantization_config`` stores it in (:func:`weight_bytes`)."""
    hidden, vocab = _int(config, "hidden_size"), _int(config, "vocab_size")
    layers = _int(config, "num_hidden_layers")
    if not hidden or not vocab or not layers:
        raise InputError(
            f"{name}: config.json has no hidden_size, vocab_size or num_hidden_layers to price a forward from",
            hint="give the target's checkpoint directory, whose weights' headers price it",
        )
    per_weight = weight_bytes(config)
    attention = _attention_weights(config)
    experts, top_k = _moe_shape(config)
    first_moe = _int(config, "first_k_dense_replace") if experts else layers
    moe_layers = layers - first_moe
    expert = 3 * hidden * _int(config, "moe_intermediate_size")
    shared = _int(config, "n_shared_experts") * expert
    dense_mlp = 3 * hidden * _int(config, "intermediate_size")
    lm_head = vocab * hidden
    dense = (
        layers * attention * per_weight("model.layers.0.self_attn.o_proj")
        + first_moe * dense_mlp * per_weight("model.layers.0.mlp.down_proj")
        + moe_layers * shared * per_weight("model.layers.9.mlp.shared_experts.down_proj")
        + moe_layers * experts * hidden * SERVING_WEIGHT_BYTES  # the router
        + lm_head * per_weight("lm_head")
    )
    kv, replicated = kv_bytes_per_position(config)
    expert_bytes = expert * per_weight("model.layers.9.mlp.experts.0.down_proj")
    row = hidden * SERVING_WEIGHT_BYTES
    return TargetWeights(
        name, "config.json", layers, round(dense), row, moe_layers, experts, top_k, expert_bytes, kv, replicated
    )


def _attention_weights(config: dict[str, Any]) -> int:
    """One layer's attention weights: MLA (DeepSeek-V3) where the config has a latent, else GQA."""
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads", 1)
    if _int(config, "kv_lora_rank"):
        nope, rope, v = (_int(config, key) for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        q_lora, kv_lora = _int(config, "q_lora_rank"), _int(config, "kv_lora_rank")
        query = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        return query + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * hidden
    head_dim = _int(config, "head_dim") or hidden // heads
    kv_heads = _int(config, "num_key_value_heads", heads)
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def weight_bytes(config: dict[str, Any]) -> Any:
    """A module name -> the bytes a weight of it is stored in: a compressed-tensors group-quantized weight is
    ``num_bits / 8`` plus a BF16 scale each ``group_size`` weights where its config group targets ``Linear`` and
    ``ignore`` does not name it (Kimi-K2.5 stores its routed experts in INT4 with groups of 32: 0.5625 bytes a
    weight); every other weight is BF16."""
    quant = config.get("quantization_config")
    groups = quant.get("config_groups") if isinstance(quant, dict) else None
    if not isinstance(groups, dict):
        return lambda _module: SERVING_WEIGHT_BYTES
    ignore = [entry for entry in quant.get("ignore", ()) if isinstance(entry, str)] if isinstance(quant, dict) else []
    quantized = SERVING_WEIGHT_BYTES
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and isinstance(weights.get("num_bits"), int):
            group_size = weights.get("group_size") or 0
            quantized = weights["num_bits"] / 8 + (SERVING_WEIGHT_BYTES / group_size if group_size else 0.0)

    def ignored(module: str) -> bool:
        return any(
            re.fullmatch(entry[3:], module) if entry.startswith("re:") else module == entry or module.endswith(entry)
            for entry in ignore
        )

    return lambda module: SERVING_WEIGHT_BYTES if ignored(module) else quantized


def expected_experts_text(weights: TargetWeights, tokens: int, sequences: int = 1, locality: float = 0.0) -> str:
    found = weights.distinct_experts(tokens, sequences, locality)
    return f"{found:.1f} of {weights.experts}" if weights.experts else "-"
