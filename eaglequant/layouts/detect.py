"""Building the canonical :class:`HeadDescription` from a checkpoint's config and tensor headers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from eaglequant.checkpoint.dtypes import FLOAT_SOURCE_DTYPES
from eaglequant.checkpoint.safetensors_file import TensorInfo
from eaglequant.common.errors import LayoutError
from eaglequant.layouts.families import LayoutEvidence, identify
from eaglequant.layouts.head import Attention, FusedGroup, HeadDescription, HeadDims, HeadLinear, HeadTensor, Role
from eaglequant.layouts.names import ParsedName, parse_name

EXPECTED = (
    "an EAGLE-3 head: decoder tensors under midlayer.* or layers.N.* "
    "(self_attn.q_proj/k_proj/v_proj/o_proj or MLA q_a_proj/kv_a_proj_with_mqa/kv_b_proj, "
    "mlp.gate_proj/up_proj/down_proj) plus fc.weight"
)

# Linears a serving engine fuses into one module, keyed by the fused module's name.
FUSED_KINDS = {
    "qkv_proj": ("self_attn", ("q_proj", "k_proj", "v_proj")),
    "gate_up_proj": ("mlp", ("gate_proj", "up_proj")),
    "fused_qkv_a_proj": ("self_attn", ("q_a_proj", "kv_a_proj_with_mqa")),
}


class TensorSource(Protocol):
    """What describing a head needs: the directory, its config.json and every tensor's header."""

    @property
    def root(self) -> Path: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def source_format(self) -> str: ...
    @property
    def tensors(self) -> dict[str, TensorInfo]: ...


def describe_head(checkpoint: TensorSource) -> HeadDescription:
    """Detect the layout of ``checkpoint`` and check every tensor's shape against config.json."""
    parsed = {name: parse_name(name) for name in checkpoint.tensors}
    linears_by_layer = [p for p in parsed.values() if p.role is Role.LINEAR and p.layer is not None]
    if not linears_by_layer or not any(p.module == "fc" for p in parsed.values()):
        sample = ", ".join(sorted(checkpoint.tensors)[:6]) or "no tensors"
        raise LayoutError(f"{checkpoint.root}: unknown layout; expected {EXPECTED}; found {sample}")
    styles = {p.prefix_style for p in parsed.values() if p.prefix_style}
    if len(styles) > 1:
        raise LayoutError(f"{checkpoint.root}: mixes midlayer.* and layers.N.* tensor names; expected one naming")
    kinds = {p.kind for p in linears_by_layer}
    attention = Attention.MLA if kinds & {"q_a_proj", "kv_a_proj_with_mqa", "kv_b_proj"} else Attention.MHA
    layers = sorted({p.layer for p in linears_by_layer if p.layer is not None})
    if layers != list(range(len(layers))):
        raise LayoutError(f"{checkpoint.root}: decoder layers {layers} are not numbered 0..N-1")
    evidence = LayoutEvidence(checkpoint.config, checkpoint.source_format, styles.pop(), attention, len(layers))
    family, reason = identify(evidence)
    dims = read_dims(checkpoint, parsed, attention)
    head_tensors = tuple(
        HeadTensor(name, parsed[name].role, parsed[name].module, info) for name, info in checkpoint.tensors.items()
    )
    for tensor in head_tensors:
        _check_shape(checkpoint, tensor, parsed[tensor.name], dims)
    linears, groups = _linears_and_groups(head_tensors, parsed, attention, checkpoint)
    features = tuple(
        f
        for f in ("embed_tokens", "lm_head", "d2t", "t2d", "input_norm")
        if any(p.module == f for p in parsed.values())
    ) + (("fc_norm",) if any(p.kind == "fc_norm" for p in parsed.values()) else ())
    return HeadDescription(
        layout=family.name,
        layout_title=family.title,
        reason=reason,
        attention=attention,
        num_layers=len(layers),
        dims=dims,
        tensors=head_tensors,
        linears=linears,
        fused_groups=groups,
        features=features,
        source_dtype=_source_dtype(head_tensors),
        config=checkpoint.config,
    )


def dims_source(config: dict[str, Any]) -> dict[str, Any]:
    """speculators nest the transformer dims under ``transformer_layer_config``; others keep them on top."""
    nested = config.get("transformer_layer_config")
    if isinstance(nested, dict):
        merged = dict(nested)
        for key in ("draft_vocab_size", "target_hidden_size"):
            if config.get(key) is not None:
                merged[key] = config[key]
        return merged
    return config


def _int(source: dict[str, Any], key: str, checkpoint: TensorSource, default: int | None = None) -> int:
    value = source.get(key, default)
    if type(value) is not int or value <= 0:
        found = "missing" if key not in source else f"{source[key]!r}"
        raise LayoutError(f"{checkpoint.root / 'config.json'}: {key} is {found}; expected a positive integer")
    return value


def _optional_int(source: dict[str, Any], key: str, checkpoint: TensorSource) -> int | None:
    return None if source.get(key) is None else _int(source, key, checkpoint)


def _num_aux(config: dict[str, Any]) -> int:
    for holder in (config.get("eagle_config"), config):
        ids = holder.get("eagle_aux_hidden_state_layer_ids") if isinstance(holder, dict) else None
        if isinstance(ids, list) and ids:
            return len(ids)
    return 3


def read_dims(checkpoint: TensorSource, parsed: dict[str, ParsedName], attention: Attention) -> HeadDims:
    source = dims_source(checkpoint.config)
    hidden = _int(source, "hidden_size", checkpoint)
    heads = _int(source, "num_attention_heads", checkpoint)
    num_aux = _num_aux(checkpoint.config)
    target_hidden = _optional_int(source, "target_hidden_size", checkpoint)
    if target_hidden is None:
        fc = checkpoint.tensors.get(
            next((n for n, p in parsed.items() if p.module == "fc" and p.param == "weight"), "")
        )
        target_hidden = fc.shape[1] // num_aux if fc is not None and len(fc.shape) == 2 else hidden
    vocab = _optional_int(source, "vocab_size", checkpoint)
    dims = HeadDims(
        hidden_size=hidden,
        intermediate_size=_int(source, "intermediate_size", checkpoint),
        num_attention_heads=heads,
        num_key_value_heads=_int(source, "num_key_value_heads", checkpoint, heads),
        head_dim=_int(source, "head_dim", checkpoint, hidden // heads)
        if source.get("head_dim") is not None
        else hidden // heads,
        vocab_size=vocab,
        draft_vocab_size=_optional_int(source, "draft_vocab_size", checkpoint) or vocab,
        target_hidden_size=target_hidden,
        num_aux_hidden_states=num_aux,
    )
    if attention == Attention.MLA:
        dims = HeadDims(
            **{
                **dims.__dict__,
                "q_lora_rank": _optional_int(source, "q_lora_rank", checkpoint),
                "kv_lora_rank": _int(source, "kv_lora_rank", checkpoint),
                "qk_nope_head_dim": _int(source, "qk_nope_head_dim", checkpoint),
                "qk_rope_head_dim": _int(source, "qk_rope_head_dim", checkpoint),
                "v_head_dim": _int(source, "v_head_dim", checkpoint),
            },
        )
    return dims


def _expected_shapes(p: ParsedName, d: HeadDims) -> list[tuple[int, ...]] | None:
    """Shapes config.json allows for one tensor; None when the config does not constrain it."""
    h, inp = d.hidden_size, [2 * d.hidden_size] if p.layer == 0 else [d.hidden_size, 2 * d.hidden_size]
    if p.role is Role.BIAS or p.role is Role.OTHER:
        return None
    if p.role is Role.VOCAB_MAP:
        size = d.draft_vocab_size if p.kind == "d2t" else d.vocab_size
        return None if size is None else [(size,)]
    if p.role is Role.EMBEDDING:
        return None if d.vocab_size is None else [(d.vocab_size, h)]
    if p.role is Role.NORM:
        sizes = {
            "norm": h,
            "hidden_norm": h,
            "input_layernorm": h,
            "post_attention_layernorm": h,
            "fc_norm": d.target_hidden_size,
            "input_norm": d.num_aux_hidden_states * d.target_hidden_size,
            "q_a_layernorm": d.q_lora_rank,
            "kv_a_layernorm": d.kv_lora_rank,
            "q_norm": d.head_dim,
            "k_norm": d.head_dim,
        }
        size = sizes.get(p.kind)
        return None if size is None else [(size,)]
    nope, rope, v = d.qk_nope_head_dim or 0, d.qk_rope_head_dim or 0, d.v_head_dim or 0
    q_out = d.num_attention_heads * (nope + rope) if nope else d.num_attention_heads * d.head_dim
    outs = {
        "fc": [h],
        "lm_head": [v_ for v_ in (d.draft_vocab_size, d.vocab_size) if v_],
        "q_proj": [q_out],
        "k_proj": [d.num_key_value_heads * d.head_dim],
        "v_proj": [d.num_key_value_heads * d.head_dim],
        "o_proj": [h],
        "gate_proj": [d.intermediate_size],
        "up_proj": [d.intermediate_size],
        "down_proj": [h],
        "q_a_proj": [d.q_lora_rank or 0],
        "q_b_proj": [q_out],
        "kv_a_proj_with_mqa": [(d.kv_lora_rank or 0) + rope],
        "kv_b_proj": [d.num_attention_heads * (nope + v)],
    }
    ins = {
        "fc": [d.num_aux_hidden_states * d.target_hidden_size],
        "lm_head": [h],
        "o_proj": [d.num_attention_heads * (v or d.head_dim)],
        "gate_proj": [h],
        "up_proj": [h],
        "down_proj": [d.intermediate_size],
        "q_b_proj": [d.q_lora_rank or 0],
        "kv_b_proj": [d.kv_lora_rank or 0],
    }.get(p.kind, inp)
    out_sizes = outs[p.kind]
    if not out_sizes:  # lm_head, and config.json names no vocabulary size
        return None
    return [(o, i) for o in out_sizes for i in ins]


def _check_shape(checkpoint: TensorSource, tensor: HeadTensor, p: ParsedName, dims: HeadDims) -> None:
    allowed = _expected_shapes(p, dims)
    if allowed is None or tensor.info.shape in allowed:
        return
    want = " or ".join(str(list(s)) for s in allowed)
    raise LayoutError(
        f"{tensor.info.file}: tensor {tensor.name!r} has shape {list(tensor.info.shape)} but "
        f"{checkpoint.root / 'config.json'} implies {want}",
        hint="the config does not belong to these weights",
    )


def _linears_and_groups(
    tensors: tuple[HeadTensor, ...], parsed: dict[str, ParsedName], attention: Attention, checkpoint: TensorSource
) -> tuple[tuple[HeadLinear, ...], tuple[FusedGroup, ...]]:
    present = {parsed[t.name].module for t in tensors if t.role is Role.LINEAR}
    groups: list[FusedGroup] = []
    layers = sorted({p.layer for p in parsed.values() if p.layer is not None})
    for layer in layers:
        for fused_type, (block, members) in FUSED_KINDS.items():
            modules = tuple(f"layers.{layer}.{block}.{m}" for m in members)
            found = [m for m in modules if m in present]
            if not found:
                continue
            if len(found) != len(modules):
                missing = sorted(set(modules) - set(found))
                if fused_type == "fused_qkv_a_proj":
                    continue  # no q_lora: q_proj and kv_a_proj_with_mqa stay separate modules
                raise LayoutError(
                    f"{checkpoint.root}: layer {layer} has {', '.join(found)} but not {', '.join(missing)}",
                    hint="the checkpoint is incomplete",
                )
            name = f"layers.{layer}.{block}.{fused_type}"
            groups.append(FusedGroup(name, fused_type, layer, modules))
    linears = []
    for t in tensors:
        p = parsed[t.name]
        if t.role is not Role.LINEAR:
            continue
        if len(t.info.shape) != 2:
            raise LayoutError(f"{t.info.file}: linear weight {t.name!r} is not 2-D (shape {list(t.info.shape)})")
        linears.append(
            HeadLinear(
                p.module,
                t.name,
                p.kind,
                p.layer,
                t.info.shape[0],
                t.info.shape[1],
                t.info.dtype,
            )
        )
    linears.sort(key=lambda lin: (lin.layer is None, lin.layer or 0, lin.module))
    return tuple(linears), tuple(groups)


def _source_dtype(tensors: tuple[HeadTensor, ...]) -> str:
    counts = Counter(t.info.dtype for t in tensors if t.role is Role.LINEAR)
    return counts.most_common(1)[0][0] if counts else "BF16"


def check_quantizable_dtype(info: TensorInfo) -> None:
    if info.dtype not in FLOAT_SOURCE_DTYPES:
        hint = "it looks already quantized" if info.dtype.startswith(("F8", "U8", "I8")) else "expected BF16/F16/F32"
        raise LayoutError(f"{info.file}: tensor {info.name!r} is {info.dtype}, cannot be quantized", hint=hint)
