"""Classifying checkpoint tensor names into canonical modules and roles."""

from __future__ import annotations

import re
from dataclasses import dataclass

from eaglequant.layouts.head import Role

LAYER_PREFIX = re.compile(r"^(?:midlayer|layers\.(?P<index>\d+))\.(?P<rest>.+)$")

ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLA_LINEARS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")
LAYER_NORMS = ("hidden_norm", "input_layernorm", "post_attention_layernorm")
ATTENTION_NORMS = ("q_a_layernorm", "kv_a_layernorm", "q_norm", "k_norm")
# The runtime module every engine (vLLM, SGLang, TensorRT-LLM) builds for each linear outside the decoder layer, by
# canonical name; per-module configs (ModelOpt's quantized_layers) are keyed by it.
RUNTIME_NAMES = {"lm_head": "lm_head", "fc": "model.fc"}


@dataclass(frozen=True)
class ParsedName:
    module: str  # canonical module
    param: str  # "weight", "bias", or "" for bare tensors such as d2t
    role: Role
    kind: str  # "q_proj", "norm", "d2t", ...
    layer: int | None
    prefix_style: str | None  # "midlayer" | "layers" | None for top-level tensors


def parse_name(name: str) -> ParsedName:
    """Map a checkpoint tensor name to its canonical module; unknown names get ``Role.OTHER``."""
    if name in ("d2t", "t2d"):
        return ParsedName(name, "", Role.VOCAB_MAP, name, None, None)
    module, _, param = name.rpartition(".")
    if not module:
        return ParsedName(name, "", Role.OTHER, name, None, None)
    match = LAYER_PREFIX.match(module)
    if match:
        layer = int(match.group("index") or 0)
        style = "layers" if match.group("index") is not None else "midlayer"
        return _parse_layer_module(match.group("rest"), layer, style, param)
    return _parse_top_module(module, param)


def _param_role(param: str, weight_role: Role) -> Role:
    if param == "weight":
        return weight_role
    return Role.BIAS if param == "bias" else Role.OTHER


def _parse_layer_module(rest: str, layer: int, style: str, param: str) -> ParsedName:
    canonical = f"layers.{layer}.{rest}"
    parts = rest.split(".")
    kind = parts[-1]
    if len(parts) == 2 and parts[0] == "self_attn" and kind in ATTENTION_LINEARS + MLA_LINEARS:
        return ParsedName(canonical, param, _param_role(param, Role.LINEAR), kind, layer, style)
    if len(parts) == 2 and parts[0] == "mlp" and kind in MLP_LINEARS:
        return ParsedName(canonical, param, _param_role(param, Role.LINEAR), kind, layer, style)
    if (len(parts) == 1 and kind in LAYER_NORMS) or (
        len(parts) == 2 and parts[0] == "self_attn" and kind in ATTENTION_NORMS
    ):
        return ParsedName(canonical, param, _param_role(param, Role.NORM), kind, layer, style)
    return ParsedName(canonical, param, Role.OTHER, kind, layer, style)


def _parse_top_module(module: str, param: str) -> ParsedName:
    if module in ("fc", "lm_head"):
        return ParsedName(module, param, _param_role(param, Role.LINEAR), module, None, None)
    if module in ("norm", "input_norm") or re.fullmatch(r"fc_norm\.\d+", module):
        return ParsedName(module, param, _param_role(param, Role.NORM), module.split(".")[0], None, None)
    if module == "embed_tokens":
        return ParsedName(module, param, _param_role(param, Role.EMBEDDING), module, None, None)
    return ParsedName(module, param, Role.OTHER, module, None, None)
