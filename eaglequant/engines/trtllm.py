"""TensorRT-LLM (PyTorch backend): runtime names of an EAGLE-3 draft and its exclusion rule.

Sources (NVIDIA/TensorRT-LLM, main 2026):
- ``tensorrt_llm/_torch/models/modeling_speculative.py``: ``Eagle3DraftModel`` builds ``fc`` (quantized with
  the draft's quant config), ``midlayer`` = one ``Eagle3DecoderLayer`` (``midlayer.{i}`` when there are
  several), whose attention is ``self_attn.qkv_proj`` / ``o_proj`` (Llama) or, for MLA,
  ``self_attn.kv_a_proj_with_mqa`` (q_a + kv_a fused), ``q_b_proj``, ``kv_b_proj``, ``o_proj``; MLP
  ``mlp.gate_up_proj`` / ``down_proj``. Everything sits under ``model.``; ``lm_head`` at the top.
- ``tensorrt_llm/_torch/model_config.py`` + ``quantization/modelopt_config.py``: only ModelOpt configs
  (``hf_quant_config.json`` preferred) and compressed-tensors are read; ``exclude_modules`` entries are
  ``fnmatchcase`` wildcards; a module is excluded when it, or one of its ancestors, matches, and a fused
  ``qkv_proj`` / ``gate_up_proj`` is also tried under its members' names.
"""

from __future__ import annotations

import fnmatch
import re
from typing import ClassVar

from eaglequant.engines.base import Engine
from eaglequant.layouts.head import FusedGroup, HeadDescription, HeadLinear

_FUSED_SPELLINGS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
_RUNTIME_FUSED_NAME = {"qkv_proj": "qkv_proj", "gate_up_proj": "gate_up_proj", "fused_qkv_a_proj": "kv_a_proj_with_mqa"}


def _layer_prefix(head: HeadDescription, layer: int) -> str:
    return f"model.midlayer.{layer}" if head.num_layers > 1 else "model.midlayer"


class TrtllmEngine(Engine):
    name: ClassVar[str] = "trtllm"
    title: ClassVar[str] = "TensorRT-LLM"

    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        block = group.name.split(".")[2]
        return (f"{_layer_prefix(head, group.layer)}.{block}.{_RUNTIME_FUSED_NAME[group.kind]}",)

    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        assert linear.layer is not None
        return (f"{_layer_prefix(head, linear.layer)}.{linear.module.split('.', 2)[2]}",)

    def write_pattern(self, format_name: str, runtime_name: str, any_layer: bool) -> str:
        # Runtime names do not depend on the target's layer count here.
        return runtime_name

    def matching_rule(self, format_name: str, runtime_name: str, patterns: list[str]) -> str | None:
        candidates = [runtime_name]
        parts = runtime_name.split(".")
        candidates += [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]  # ancestors
        for member in _FUSED_SPELLINGS.get(parts[-1], ()):
            candidates.append(".".join([*parts[:-1], member]))
        for pattern in patterns:
            for candidate in candidates:
                if pattern.startswith("re:"):
                    if re.match(pattern[3:], candidate):
                        return pattern
                elif fnmatch.fnmatchcase(candidate, pattern):
                    return pattern
        return None
