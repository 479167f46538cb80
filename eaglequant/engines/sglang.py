"""SGLang: runtime names of an EAGLE-3 draft and its exclusion rules.

Sources (sgl-project/sglang 0.5.23, ``python/sglang/srt``):
- ``models/llama_eagle3.py``: every draft decoder layer is built with the *model's* prefix (``model``),
  not ``model.layers.{i}``, so its modules are ``model.qkv_proj`` (override), ``model.self_attn.o_proj``,
  ``model.gate_up_proj``, ``model.down_proj`` whatever the layer; ``fc`` is a plain ``torch.nn.Linear``,
  never quantized; ``lm_head`` is a ParallelLMHead, which no linear method claims.
- ``models/kimi_k25_eagle3.py`` (MLA, one layer): ``model.self_attn.fused_qkv_a_proj_with_mqa`` (q_a + kv_a),
  ``model.self_attn.q_b_proj`` / ``kv_b_proj`` / ``o_proj``, ``model.mlp.gate_up_proj`` / ``down_proj``;
  ``fc`` is a ColumnParallelLinear at ``model.fc`` built with the quant config.
- ``layers/quantization/quark/utils.py::should_ignore_layer`` and compressed-tensors: exact, or ``re:`` +
  ``re.match``. ``layers/quantization/modelopt_quant.py::is_layer_excluded``: a glob (``*`` → ``.*``)
  full-matched against the whole name or any one dot-separated part, plus a fused-MLA rule (a pattern
  ending in q_a_proj / q_b_proj / kv_a_proj_with_mqa / kv_b_proj excludes a module whose last part
  contains that name).
"""

from __future__ import annotations

import re
from typing import ClassVar

from eaglequant.engines.base import Engine, ServingSnippet, exact_or_regex_rule
from eaglequant.layouts.head import FusedGroup, HeadDescription, HeadLinear

_LLAMA_FUSED = {"qkv_proj": "model.qkv_proj", "gate_up_proj": "model.gate_up_proj"}
_MLA_FUSED = {"fused_qkv_a_proj": "model.self_attn.fused_qkv_a_proj_with_mqa", "gate_up_proj": "model.mlp.gate_up_proj"}
_MLA_FUSED_TAILS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")


class SglangEngine(Engine):
    name: ClassVar[str] = "sglang"
    title: ClassVar[str] = "SGLang"

    def fc_unquantized(self, head: HeadDescription) -> str | None:
        if head.attention == "mla":
            return None
        return "SGLang builds a Llama draft's fc as a plain torch.nn.Linear (models/llama_eagle3.py)"

    def lm_head_unquantized(self, head: HeadDescription) -> str | None:
        return "SGLang's ParallelLMHead is claimed by no linear method"

    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        return ((_MLA_FUSED if head.attention == "mla" else _LLAMA_FUSED)[group.kind],)

    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        local = linear.module.split(".", 2)[2]  # "self_attn.o_proj", "mlp.down_proj"
        if head.attention != "mla":
            local = local.removeprefix("mlp.")
        return (f"model.{local}",)

    def write_pattern(self, format_name: str, runtime_name: str, any_layer: bool) -> str:
        if format_name == "modelopt":
            return runtime_name
        return f"re:^{re.escape(runtime_name)}$"

    def matching_rule(self, format_name: str, runtime_name: str, patterns: list[str]) -> str | None:
        if format_name == "modelopt":
            return _modelopt_rule(runtime_name, patterns)
        return exact_or_regex_rule(runtime_name, patterns)

    def serving_snippets(self, target: str, draft: str, draft_tokens: int) -> list[ServingSnippet]:
        line = (
            f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {draft} --speculative-num-steps {draft_tokens} "
            f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {draft_tokens + 1}"
        )
        return [ServingSnippet("SGLang", "bash", line)]


def _modelopt_rule(runtime_name: str, patterns: list[str]) -> str | None:
    parts = runtime_name.split(".")
    for pattern in patterns:
        regex = re.compile(pattern.replace(".", r"\.").replace("*", ".*"))
        if regex.fullmatch(runtime_name) or any(regex.fullmatch(part) for part in parts):
            return pattern
        tail = pattern.rsplit(".", 1)[-1]
        if tail in _MLA_FUSED_TAILS and tail in parts[-1]:
            return pattern
    return None
