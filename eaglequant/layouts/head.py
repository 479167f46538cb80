"""One canonical description of an EAGLE-3 draft head, whatever layout it was saved in.

Canonical module names use ``layers.{i}.`` for decoder layers (``midlayer.`` is layer 0), and the
top-level names ``fc``, ``norm``, ``lm_head``, ``embed_tokens``, ``fc_norm.{k}``, ``input_norm``.
Checkpoint tensor names are kept alongside, because the output keeps the source's names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from eaglequant.checkpoint.safetensors_file import TensorInfo
from eaglequant.common.text_enum import TextEnum


class Attention(TextEnum):
    """A draft head's attention, which decides its modules, its forward and what engines do with it."""

    MHA = "mha"  # multi-head (grouped-query) attention: Llama's q/k/v, fused as qkv_proj
    MLA = "mla"  # multi-head latent attention: DeepSeek's and Kimi's q_a/q_b, kv_a (with the rope key), kv_b


class Role(str, Enum):
    LINEAR = "linear"
    NORM = "norm"
    EMBEDDING = "embedding"
    VOCAB_MAP = "vocab_map"
    BIAS = "bias"
    OTHER = "other"


@dataclass(frozen=True)
class HeadTensor:
    name: str  # as in the checkpoint
    role: Role
    module: str  # canonical module name
    info: TensorInfo


@dataclass(frozen=True)
class HeadLinear:
    module: str  # canonical, e.g. "layers.0.self_attn.q_proj"
    weight: str  # checkpoint tensor name of the weight
    module_type: str  # "q_proj", "gate_proj", "fc", "lm_head", ...
    layer: int | None
    out_features: int
    in_features: int
    dtype: str = "BF16"  # safetensors dtype of the source weight

    @property
    def checkpoint_module(self) -> str:
        return self.weight.removesuffix(".weight")


@dataclass(frozen=True)
class FusedGroup:
    """Linears that serving engines fuse into one module; they must share one quantization scheme."""

    name: str  # canonical fused name, e.g. "layers.0.self_attn.qkv_proj"
    module_type: str  # "qkv_proj" | "gate_up_proj" | "fused_qkv_a_proj"
    layer: int
    members: tuple[str, ...]  # canonical member modules, in engine order


@dataclass(frozen=True)
class HeadDims:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int | None
    draft_vocab_size: int | None
    target_hidden_size: int
    num_aux_hidden_states: int
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None


@dataclass(frozen=True)
class HeadDescription:
    layout: str  # family name, e.g. "specforge-llama"
    layout_title: str
    reason: str  # why this layout was chosen, in words
    attention: Attention
    num_layers: int
    dims: HeadDims
    tensors: tuple[HeadTensor, ...]
    linears: tuple[HeadLinear, ...]
    fused_groups: tuple[FusedGroup, ...]
    features: tuple[str, ...]  # "embed_tokens", "lm_head", "d2t", "t2d", "fc_norm", "input_norm"
    source_dtype: str
    config: dict[str, Any] = field(repr=False)

    def linear(self, module: str) -> HeadLinear:
        found = self.find_linear(module)
        if found is None:
            raise KeyError(module)
        return found

    def find_linear(self, module: str) -> HeadLinear | None:
        """The linear of canonical name ``module`` (``lm_head``), or None where the head has none."""
        return next((linear for linear in self.linears if linear.module == module), None)

    def group_of(self, module: str) -> FusedGroup | None:
        for group in self.fused_groups:
            if module in group.members:
                return group
        return None

    @property
    def decoder_linears(self) -> tuple[HeadLinear, ...]:
        return tuple(linear for linear in self.linears if linear.layer is not None)
