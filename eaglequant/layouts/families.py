"""The EAGLE-3 layout families we recognise, in the order they are tried.

A family only names where a head came from and why we think so; the canonical description is the
same for all of them. Add a family by appending one :class:`Family` to :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eaglequant.layouts.head import Attention

MODELOPT_EAGLE_FLAGS = ("next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")


@dataclass(frozen=True)
class LayoutEvidence:
    config: dict[str, Any]
    source_format: str
    prefix_style: str  # "midlayer" | "layers"
    attention: Attention
    num_layers: int


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    match: Callable[[LayoutEvidence], str | None]  # a reason in words, or None


def _architectures(config: dict[str, Any]) -> list[str]:
    value = config.get("architectures")
    return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []


def _speculators(e: LayoutEvidence) -> str | None:
    if e.config.get("speculators_model_type") == "eagle3":
        return "config.json has speculators_model_type 'eagle3' (dims under transformer_layer_config)"
    arch = {"Eagle3Speculator", "Eagle3DraftModel"} & set(_architectures(e.config))
    return f"architectures lists {sorted(arch)[0]}" if arch else None


def _modelopt(e: LayoutEvidence) -> str | None:
    eagle = e.config.get("eagle_config")
    flags = [k for k in MODELOPT_EAGLE_FLAGS if isinstance(eagle, dict) and k in eagle]
    if flags and e.prefix_style == "layers":
        return f"layers.N.* tensors and eagle_config carries ModelOpt's export flags ({', '.join(flags)})"
    return None


def _eagle_original(e: LayoutEvidence) -> str | None:
    if e.source_format == "pytorch-bin" and e.prefix_style == "midlayer":
        return "pytorch_model.bin with midlayer.* tensors (original EAGLE-3 release)"
    return None


def _torchspec_mla(e: LayoutEvidence) -> str | None:
    if e.attention == Attention.MLA:
        arch = ", ".join(_architectures(e.config)) or "no architectures"
        return f"MLA attention tensors (q_a_proj / kv_a_proj_with_mqa, {e.prefix_style}.*) and {arch}"
    return None


def _specforge_llama(e: LayoutEvidence) -> str | None:
    if e.prefix_style == "midlayer":
        return "midlayer.* tensors with Llama attention (q_proj/k_proj/v_proj)"
    return None


def _layers_llama(e: LayoutEvidence) -> str | None:
    return f"layers.N.* tensors with Llama attention, {e.num_layers} decoder layer(s)"


FAMILIES: tuple[Family, ...] = (
    Family("speculators", "vLLM speculators (Eagle3Speculator)", _speculators),
    Family("modelopt", "NVIDIA ModelOpt export", _modelopt),
    Family("eagle-original", "original EAGLE-3 (.bin)", _eagle_original),
    Family("torchspec-mla", "TorchSpec MLA", _torchspec_mla),
    Family("specforge-llama", "SpecForge / TorchSpec Llama", _specforge_llama),
    Family("eagle3-layers", "EAGLE-3 with layers.N. naming (TorchSpec --vllm, multi-layer)", _layers_llama),
)


def identify(evidence: LayoutEvidence) -> tuple[Family, str]:
    for family in FAMILIES:
        reason = family.match(evidence)
        if reason:
            return family, reason
    raise AssertionError("the last family matches everything")
