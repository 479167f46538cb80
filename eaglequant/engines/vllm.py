"""vLLM: runtime names of an EAGLE-3 draft and how its quantization config excludes modules.

Sources (vllm-project/vllm):
- ``vllm/model_executor/models/llama_eagle3.py``: the draft's decoder layer is built at prefix
  ``model.layers.{start_layer_id + i}`` with start_layer_id = the target's layer count; it overrides
  ``self_attn.qkv_proj`` with ``prefix=maybe_prefix(prefix, "qkv_proj")``, so the fused QKV is matched
  as ``model.layers.{L}.qkv_proj`` (no ``self_attn``); ``fc`` is a ``ReplicatedLinear`` at ``model.fc``
  built with the draft's quant_config; ``lm_head`` is a ParallelLMHead.
- ``vllm/model_executor/models/deepseek_eagle3.py`` + ``deepseek_v2.py`` (MLA): ``self_attn.fused_qkv_a_proj``
  (q_a_proj + kv_a_proj_with_mqa when q_lora_rank is set), ``q_b_proj`` (or ``q_proj``), ``kv_b_proj``, ``o_proj``.
- ``vllm/model_executor/layers/quantization/quark/quark.py`` + ``quark/utils.py::should_ignore_layer``:
  an ``exclude`` entry matches a prefix when it is equal to it, or when it starts with ``re:`` and
  ``re.match`` (anchored at the start only) succeeds. The draft's QuarkConfig gets no
  packed_modules_mapping, so per-shard names such as ``q_proj`` never match a fused module.
  Quark's get_quant_method returns None for non-linear layers, so ``lm_head`` is never quantized.
"""

from __future__ import annotations

import re
from typing import ClassVar

from eaglequant.engines.base import Engine, RuntimeModule
from eaglequant.layouts.head import HeadDescription


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    title: ClassVar[str] = "vLLM"

    def runtime_modules(self, head: HeadDescription, target_layers: int) -> list[RuntimeModule]:
        present = {linear.module for linear in head.linears}
        modules = []
        if "fc" in present:
            modules.append(RuntimeModule(("model.fc",), ("fc",)))
        if "lm_head" in present:
            modules.append(RuntimeModule(("lm_head",), ("lm_head",), quantizable=False))
        grouped = {m for group in head.fused_groups for m in group.members}
        for group in head.fused_groups:
            layer = f"model.layers.{target_layers + group.layer}"
            block = group.name.split(".")[2]  # "self_attn" | "mlp"
            names: tuple[str, ...] = (f"{layer}.{block}.{group.kind}",)
            if group.kind == "qkv_proj":
                names = (f"{layer}.qkv_proj", f"{layer}.self_attn.qkv_proj")
            modules.append(RuntimeModule(names, group.members))
        for linear in head.decoder_linears:
            if linear.module in grouped:
                continue
            assert linear.layer is not None
            local = linear.module.split(".", 2)[2]  # "self_attn.o_proj"
            modules.append(RuntimeModule((f"model.layers.{target_layers + linear.layer}.{local}",), (linear.module,)))
        return modules

    def matching_rule(self, format_name: str, runtime_name: str, patterns: list[str]) -> str | None:
        # Quark's exclude and compressed-tensors' ignore share vLLM's find_matching_patterns:
        # exact string, or "re:" + re.match.
        for pattern in patterns:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], runtime_name):
                    return pattern
            elif pattern == runtime_name:
                return pattern
        return None
