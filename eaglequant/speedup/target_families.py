"""A decoder LLM's weights from its ``config.json`` alone, read by each family's own keys: one small reader per
family, registered by ``model_type`` in :data:`FAMILIES`.

Each reader returns the target's :class:`TargetShape`: every decoder layer's linears by checkpoint name (attention,
a dense MLP or shared experts, the router), one routed expert's linears in an MoE layer, and the elements of the
weights that are no linear (norms, biases, attention sinks). Which layers are MoE and what an expert holds follow
transformers' own modeling code for the family (vLLM's where they differ: DeepSeek-V3's ``moe_layer_freq``). A key
a family needs and the config lacks is one line naming it, never a weight priced at zero; a config that is not a
decoder LLM is refused. Add a family by writing its reader and one entry in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError

_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Linear:
    """One linear (or one fused stack's share of an expert): ``params`` weights, ``bias`` bias elements."""

    name: str  # the module's checkpoint name: model.layers.3.self_attn.q_proj
    params: int
    bias: int = 0
    quantizable: bool = True  # False: the router, which every engine builds unquantized


@dataclass(frozen=True)
class Layer:
    """One decoder layer: ``dense`` linears every token runs through, ``expert`` one routed expert's (empty in a
    dense layer), and ``other`` / ``other_fp32`` elements of its non-linear weights at the serving dtype / float32."""

    dense: tuple[Linear, ...]
    other: int
    expert: tuple[Linear, ...] = ()
    other_fp32: int = 0


@dataclass(frozen=True)
class TargetShape:
    family: str
    layers: tuple[Layer, ...]
    experts: int  # routed experts in each MoE layer
    experts_per_token: int
    hidden: int
    vocab: int
    tied: bool  # the lm_head is the embedding

    @property
    def lm_head(self) -> Linear:
        return Linear("lm_head", self.vocab * self.hidden)


def _int(config: dict[str, Any], key: str, default: int = 0) -> int:
    value = config.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _need(config: dict[str, Any], family: str, *keys: str) -> int:
    """The first of ``keys`` the config has (a positive integer), else one line naming them."""
    for key in keys:
        if _int(config, key) > 0:
            return _int(config, key)
    raise InputError(
        f"config.json ({family}): no {' or '.join(keys)}, which prices its {_WHAT.get(keys[0], 'weights')}",
        hint="give the target's own config.json, or its checkpoint directory whose weights' headers price it",
    )


_WHAT = {
    "moe_intermediate_size": "routed experts",
    "n_routed_experts": "routed experts",
    "num_experts": "routed experts",
    "num_local_experts": "routed experts",
    "intermediate_size_mlp": "dense MLP",
    "intermediate_size": "MLP",
    "num_experts_per_tok": "experts a token is routed to",
    "shared_expert_intermediate_size": "shared expert",
}


def _mlp(prefix: str, hidden: int, inner: int, names: tuple[str, ...] = _MLP, bias: bool = False) -> tuple[Linear, ...]:
    """A gated MLP: gate and up [inner, hidden], down [hidden, inner]."""
    gate, up, down = names
    return (
        Linear(f"{prefix}.{gate}", hidden * inner, inner if bias else 0),
        Linear(f"{prefix}.{up}", hidden * inner, inner if bias else 0),
        Linear(f"{prefix}.{down}", inner * hidden, hidden if bias else 0),
    )


def _gqa(config: dict[str, Any], prefix: str, bias: str = "", qk_norm: bool = False) -> tuple[tuple[Linear, ...], int]:
    """q, k, v, o of grouped-query attention, and the elements of q/k norms. ``bias``: the projections with a bias
    ("qkv" or "qkvo")."""
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads", 1)
    head_dim = _int(config, "head_dim") or hidden // heads
    kv_heads = _int(config, "num_key_value_heads", heads)
    outs = {"q": heads * head_dim, "k": kv_heads * head_dim, "v": kv_heads * head_dim}
    linears = [Linear(f"{prefix}.{p}_proj", hidden * n, n if p in bias else 0) for p, n in outs.items()]
    linears.append(Linear(f"{prefix}.o_proj", heads * head_dim * hidden, hidden if "o" in bias else 0))
    return tuple(linears), 2 * head_dim if qk_norm else 0


def mla_linears(config: dict[str, Any], prefix: str) -> tuple[tuple[Linear, ...], int]:
    """DeepSeek-V3's multi-head latent attention: the query through a LoRA of rank ``q_lora_rank`` (or one
    projection without it), the compressed KV latent and its decompression, the output; and the latents' norms."""
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads", 1)
    nope, rope, v = (_int(config, key) for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    q_lora, kv_lora = _int(config, "q_lora_rank"), _int(config, "kv_lora_rank")
    bias = bool(config.get("attention_bias"))
    query: tuple[Linear, ...]
    if q_lora:
        query = (
            Linear(f"{prefix}.q_a_proj", hidden * q_lora, q_lora if bias else 0),
            Linear(f"{prefix}.q_b_proj", q_lora * heads * (nope + rope)),
        )
    else:
        query = (Linear(f"{prefix}.q_proj", hidden * heads * (nope + rope)),)
    latent = (
        Linear(f"{prefix}.kv_a_proj_with_mqa", hidden * (kv_lora + rope), kv_lora + rope if bias else 0),
        Linear(f"{prefix}.kv_b_proj", kv_lora * heads * (nope + v)),
        Linear(f"{prefix}.o_proj", heads * v * hidden, hidden if bias else 0),
    )
    return query + latent, q_lora + kv_lora


def _router(prefix: str, hidden: int, experts: int, bias: bool = False) -> Linear:
    return Linear(prefix, hidden * experts, experts if bias else 0, quantizable=False)


def _shape(config: dict[str, Any], family: str, layers: list[Layer], experts: int = 0, top_k: int = 0) -> TargetShape:
    return TargetShape(
        family,
        tuple(layers),
        experts,
        top_k,
        _int(config, "hidden_size"),
        _int(config, "vocab_size"),
        bool(config.get("tie_word_embeddings")),
    )


def _norms(hidden: int) -> int:
    return 2 * hidden  # input_layernorm and post_attention_layernorm


def _dense(config: dict[str, Any], family: str, bias: str, qk_norm: bool) -> TargetShape:
    hidden = _int(config, "hidden_size")
    inner = _need(config, family, "intermediate_size")
    mlp_bias = bool(config.get("mlp_bias"))
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        attention, norms = _gqa(config, f"model.layers.{index}.self_attn", bias, qk_norm)
        mlp = _mlp(f"model.layers.{index}.mlp", hidden, inner, bias=mlp_bias)
        layers.append(Layer(attention + mlp, _norms(hidden) + norms))
    return _shape(config, family, layers)


def llama(config: dict[str, Any]) -> TargetShape:
    return _dense(config, "Llama", "qkvo" if config.get("attention_bias") else "", qk_norm=False)


def mistral(config: dict[str, Any]) -> TargetShape:
    return _dense(config, "Mistral", "", qk_norm=False)


def qwen2(config: dict[str, Any]) -> TargetShape:
    return _dense(config, "Qwen2", "qkv", qk_norm=False)


def qwen3(config: dict[str, Any]) -> TargetShape:
    return _dense(config, "Qwen3", "qkvo" if config.get("attention_bias") else "", qk_norm=True)


def deepseek_v3(config: dict[str, Any], family: str = "DeepSeek-V3") -> TargetShape:
    """MLA attention; the first ``first_k_dense_replace`` layers dense, then every ``moe_layer_freq``-th an MoE
    layer of ``n_routed_experts`` and ``n_shared_experts`` experts of ``moe_intermediate_size`` (vLLM's
    deepseek_v2.py), routed by a gate with a correction bias."""
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "n_routed_experts")
    expert_inner = _need(config, family, "moe_intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok")
    first, freq = _int(config, "first_k_dense_replace"), _int(config, "moe_layer_freq", 1) or 1
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        mlp = f"model.layers.{index}.mlp"
        attention, norms = mla_linears(config, f"model.layers.{index}.self_attn")
        if index >= first and index % freq == 0:
            shared = _mlp(f"{mlp}.shared_experts", hidden, _int(config, "n_shared_experts") * expert_inner)
            dense = (*attention, *shared, _router(f"{mlp}.gate", hidden, experts))
            expert = _mlp(f"{mlp}.experts.0", hidden, expert_inner)
            layers.append(Layer(dense, _norms(hidden) + norms + experts, expert))  # + e_score_correction_bias
        else:
            dense_mlp = _mlp(mlp, hidden, _need(config, family, "intermediate_size"))
            layers.append(Layer(attention + dense_mlp, _norms(hidden) + norms))
    return _shape(config, family, layers, experts, top_k)


def glm4_moe(config: dict[str, Any]) -> TargetShape:
    """GLM-4.5: GQA (biases on q, k, v with ``attention_bias``, q/k norms with ``use_qk_norm``); the first
    ``first_k_dense_replace`` layers dense, every later one MoE with ``n_shared_experts`` shared experts, routed by
    a gate whose correction bias is float32."""
    family = "GLM-4.5"
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "n_routed_experts")
    expert_inner = _need(config, family, "moe_intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok")
    bias = "qkv" if config.get("attention_bias") else ""
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        mlp = f"model.layers.{index}.mlp"
        attention, norms = _gqa(config, f"model.layers.{index}.self_attn", bias, bool(config.get("use_qk_norm")))
        if index >= _int(config, "first_k_dense_replace"):
            shared = _mlp(f"{mlp}.shared_experts", hidden, _int(config, "n_shared_experts") * expert_inner)
            dense = (*attention, *shared, _router(f"{mlp}.gate", hidden, experts))
            expert = _mlp(f"{mlp}.experts.0", hidden, expert_inner)
            layers.append(Layer(dense, _norms(hidden) + norms, expert, other_fp32=experts))
        else:
            dense_mlp = _mlp(mlp, hidden, _need(config, family, "intermediate_size"))
            layers.append(Layer(attention + dense_mlp, _norms(hidden) + norms))
    return _shape(config, family, layers, experts, top_k)


def _qwen_moe(config: dict[str, Any], family: str, shared_expert: bool) -> TargetShape:
    """Qwen2-MoE / Qwen3-MoE: a layer is MoE unless it is in ``mlp_only_layers`` or ``decoder_sparse_step`` skips
    it; ``num_experts`` of ``moe_intermediate_size``; Qwen2-MoE adds a gated shared expert."""
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "num_experts", "num_local_experts")  # transformers 5 writes the second
    expert_inner = _need(config, family, "moe_intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok")
    step = _int(config, "decoder_sparse_step", 1) or 1
    mlp_only = set(config.get("mlp_only_layers") or ())
    bias = (
        ("qkv" if config.get("qkv_bias", True) else "")
        if shared_expert
        else ("qkvo" if config.get("attention_bias") else "")
    )
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        mlp = f"model.layers.{index}.mlp"
        attention, norms = _gqa(config, f"model.layers.{index}.self_attn", bias, qk_norm=not shared_expert)
        if index not in mlp_only and (index + 1) % step == 0:
            dense = (*attention, _router(f"{mlp}.gate", hidden, experts))
            if shared_expert:
                inner = _need(config, family, "shared_expert_intermediate_size")
                dense += (*_mlp(f"{mlp}.shared_expert", hidden, inner), Linear(f"{mlp}.shared_expert_gate", hidden))
            layers.append(Layer(dense, _norms(hidden) + norms, _mlp(f"{mlp}.experts.0", hidden, expert_inner)))
        else:
            dense_mlp = _mlp(mlp, hidden, _need(config, family, "intermediate_size"))
            layers.append(Layer(attention + dense_mlp, _norms(hidden) + norms))
    return _shape(config, family, layers, experts, top_k)


def qwen2_moe(config: dict[str, Any]) -> TargetShape:
    return _qwen_moe(config, "Qwen2-MoE", shared_expert=True)


def qwen3_moe(config: dict[str, Any]) -> TargetShape:
    return _qwen_moe(config, "Qwen3-MoE", shared_expert=False)


def mixtral(config: dict[str, Any]) -> TargetShape:
    """Mixtral: every layer MoE, ``num_local_experts`` experts (w1, w3 gate and up, w2 down) of
    ``intermediate_size``, no dense MLP."""
    family = "Mixtral"
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "num_local_experts")
    inner = _need(config, family, "intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok")
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        moe = f"model.layers.{index}.block_sparse_moe"
        attention, _ = _gqa(config, f"model.layers.{index}.self_attn")
        expert = _mlp(f"{moe}.experts.0", hidden, inner, names=("w1", "w3", "w2"))
        layers.append(Layer((*attention, _router(f"{moe}.gate", hidden, experts)), _norms(hidden), expert))
    return _shape(config, family, layers, experts, top_k)


def gpt_oss(config: dict[str, Any]) -> TargetShape:
    """gpt-oss: every layer MoE; attention with biases and one sink per head; ``num_local_experts`` experts of
    ``intermediate_size`` stored fused (``mlp.experts.gate_up_proj`` [E, H, 2I] and ``down_proj``, each with a
    bias), a router with a bias."""
    family = "gpt-oss"
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "num_local_experts")
    inner = _need(config, family, "intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok", "experts_per_token")
    bias = "qkvo" if config.get("attention_bias", True) else ""
    layers = []
    for index in range(_int(config, "num_hidden_layers")):
        mlp = f"model.layers.{index}.mlp"
        attention, _ = _gqa(config, f"model.layers.{index}.self_attn", bias)
        expert = (
            Linear(f"{mlp}.experts.gate_up_proj", hidden * 2 * inner, 2 * inner),
            Linear(f"{mlp}.experts.down_proj", inner * hidden, hidden),
        )
        sinks = _int(config, "num_attention_heads")
        dense = (*attention, _router(f"{mlp}.router", hidden, experts, bias=True))
        layers.append(Layer(dense, _norms(hidden) + sinks, expert))
    return _shape(config, family, layers, experts, top_k)


def llama4_text(config: dict[str, Any]) -> TargetShape:
    """Llama 4's text model: MoE in the layers ``moe_layers`` names (else every ``interleave_moe_layer_step``-th),
    each with ``num_local_experts`` fused experts and a shared expert of ``intermediate_size``; the other layers a
    dense MLP of ``intermediate_size_mlp``. Its q/k norm has no weights."""
    family = "Llama 4"
    hidden = _int(config, "hidden_size")
    experts = _need(config, family, "num_local_experts")
    inner = _need(config, family, "intermediate_size")
    top_k = _need(config, family, "num_experts_per_tok")
    layers_count = _int(config, "num_hidden_layers")
    step = _int(config, "interleave_moe_layer_step", 1) or 1
    moe = config.get("moe_layers")
    moe_layers = set(moe) if isinstance(moe, list) else set(range(step - 1, layers_count, step))
    bias = "qkvo" if config.get("attention_bias") else ""
    layers = []
    for index in range(layers_count):
        ff = f"model.layers.{index}.feed_forward"
        attention, _ = _gqa(config, f"model.layers.{index}.self_attn", bias)
        if index in moe_layers:
            shared = _mlp(f"{ff}.shared_expert", hidden, inner)
            expert = (
                Linear(f"{ff}.experts.gate_up_proj", hidden * 2 * inner),
                Linear(f"{ff}.experts.down_proj", inner * hidden),
            )
            layers.append(
                Layer((*attention, *shared, _router(f"{ff}.router", hidden, experts)), _norms(hidden), expert)
            )
        else:
            dense_mlp = _mlp(ff, hidden, _need(config, family, "intermediate_size_mlp"))
            layers.append(Layer(attention + dense_mlp, _norms(hidden)))
    return _shape(config, family, layers, experts, top_k)


# model_type -> the family's reader. Kimi-K2 / K2.5's text model is DeepSeek-V3's architecture.
FAMILIES: dict[str, Callable[[dict[str, Any]], TargetShape]] = {
    "llama": llama,
    "mistral": mistral,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "deepseek_v3": deepseek_v3,
    "kimi_k2": lambda config: deepseek_v3(config, "Kimi-K2 (DeepSeek-V3)"),
    "glm4_moe": glm4_moe,
    "qwen2_moe": qwen2_moe,
    "qwen3_moe": qwen3_moe,
    "mixtral": mixtral,
    "gpt_oss": gpt_oss,
    "llama4_text": llama4_text,
}

_DECODER_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration")


def family_reader(config: dict[str, Any], where: str) -> Callable[[dict[str, Any]], TargetShape]:
    """The reader of ``config``'s family (a text config), or one line: not a decoder LLM, or a family eaglequant
    cannot price from a config."""
    model_type = config.get("model_type")
    reader = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if reader is not None:
        return reader
    architectures = [a for a in config.get("architectures") or () if isinstance(a, str)]
    if architectures and not any(a.endswith(_DECODER_SUFFIXES) for a in architectures):
        raise InputError(
            f"{where}: model_type {model_type!r} ({', '.join(architectures)}) is not a decoder LLM; "
            "a target is a causal language model",
            hint="give the config.json of the model the draft speculates for",
        )
    raise InputError(
        f"{where}: eaglequant cannot price a target of model_type {model_type!r} from its config "
        f"(it reads {', '.join(sorted(FAMILIES))})",
        hint="give the target's checkpoint directory, whose weights' headers price it",
    )


def is_decoder(config: dict[str, Any]) -> bool:
    """Whether ``config`` (a text config) names a causal-LM architecture or a family eaglequant reads."""
    architectures = [a for a in config.get("architectures") or () if isinstance(a, str)]
    return config.get("model_type") in FAMILIES or any(a.endswith(_DECODER_SUFFIXES) for a in architectures)
