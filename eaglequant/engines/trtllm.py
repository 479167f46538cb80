"""TensorRT-LLM (PyTorch backend): runtime names of an EAGLE-3 draft and its exclusion rule, for two targets.

``trtllm`` is the newest release users can install, **1.2.x** (this module); ``trtllm-main`` is the main branch as
read in 2026, whose newer loader behaviour some users build (``trtllm_main.py``, which starts from this release).
TensorRT-LLM does not install on a CPU machine (its PyPI package is a stub that fetches the wheel from NVIDIA's
index), so both are *read* from source, not run.

Shared by both (NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch``):
- ``models/modeling_speculative.py``: ``Eagle3DraftModel`` has ``fc``, ``midlayer`` = one ``Eagle3DecoderLayer``
  (``midlayer.{i}`` when there are several), whose attention is ``self_attn.qkv_proj`` / ``o_proj`` and MLP
  ``mlp.gate_up_proj`` / ``down_proj``. ``Eagle3ForCausalLM.load_weights`` puts every name but ``lm_head``
  under ``model.``.
- ``model_config.py::ModelConfig.from_pretrained``: ``hf_quant_config.json`` (ModelOpt) first, else
  ``config.json``'s ``quantization_config``; quant_method ``quark`` is never read.
- ``LMHead`` takes no quant config in released versions (newer main quantizes it only when the checkpoint
  stores ``lm_head.weight_scale``), so lm_head stays unquantized.

1.2.x (read at the 1.2 branch; see docs/engines.md for what could not be read at the tag):
- ``tensorrt_llm/models/modeling_utils.py::QuantConfig.is_module_excluded_from_quantization``: each
  ``exclude_modules`` entry is ``fnmatch.fnmatchcase`` against the full name, no ancestors, no ``re:``;
  ``_torch/models/modeling_utils.py::apply_quant_config_exclude_modules`` also asks under each fused member's
  name (``q_proj``/``k_proj``/``v_proj``, ``gate_proj``/``up_proj``).
- ``models/modeling_speculative.py``: ``fc`` is a ``Linear`` built without a quant config.
- ``quantization/mode.py::QuantAlgo`` has no ``W4A16_NVFP4`` (added on main in July 2026, PR #15703).
- ``model_config.py`` does not read compressed-tensors configs (added on main by PR #10796, 2026-01).
- No EAGLE-3 MLA draft model: absent at 1.2.0rc2 (``Eagle3DeepSeekV3ForCausalLM`` came later on main).

- ``_torch/model_config.py::load_hf_quant_config``: ``quant_method: fp8`` with ``weight_block_size`` [128, 128] is
  ``FP8_BLOCK_SCALES``; main reads the exclusions of such a config from ``modules_to_not_convert`` and always adds
  ``*kv_b_proj*``, ``*k_b_proj*``, ``*eh_proj``. What the 1.2.x release reads there could not be read at its tag
  (the versions found read no list, or only with the TRTLLM MoE backend), so the native fp8 cells of 1.2.x say no.

main (2026) is in ``trtllm_main.py``: this release with what changed since.
"""

from __future__ import annotations

import fnmatch
import re
from typing import ClassVar

from eaglequant.engines.base import Dialect, Engine, RuntimeModule, ServingSnippet, decided
from eaglequant.engines.cells import (
    FP8_BLOCK_W8A8,
    FP8_W8A8,
    INT4_W4A16,
    INT4_W4A16_ASYM,
    INT8_W8A8,
    MXFP4_W4A4,
    MXFP4_W4A16,
    NVFP4_W4A4,
    NVFP4_W4A16,
    Cells,
    loads,
    loads_if,
    refuses,
)
from eaglequant.engines.decision import ModuleDecision
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import FusedGroup, HeadDescription, HeadLinear

_FUSED_SPELLINGS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
_RUNTIME_FUSED_NAME = {"qkv_proj": "qkv_proj", "gate_up_proj": "gate_up_proj", "fused_qkv_a_proj": "kv_a_proj_with_mqa"}
_MLA_BF16_ONLY = {
    "kv_b_proj": "TensorRT-LLM splits an MLA draft's kv_b_proj into k_b_proj_trans / v_b_proj, which take only "
    "BF16 or block-FP8 weights (modeling_deepseekv3.py::DeepseekV3WeightLoader)",
    "q_a_proj": "TensorRT-LLM loads an MLA draft's fused q_a + kv_a weight with block-FP8 scales only; other "
    "scales are not loaded (modeling_deepseekv3.py::DeepseekV3WeightLoader)",
}
_MLA_BF16_ONLY["kv_a_proj_with_mqa"] = _MLA_BF16_ONLY["q_a_proj"]
_LM_HEAD = "TensorRT-LLM's LMHead takes no quant config (newer main only with a stored lm_head.weight_scale)"
_FC_12 = "TensorRT-LLM 1.2.x builds the draft's fc without a quant config (_torch/models/modeling_speculative.py)"


def _needs_block(module: RuntimeModule, kinds: KindPair) -> str | None:
    """Why a BF16 copy of ``module`` fails to load under a block-FP8 config (None: it loads)."""
    if kinds.weight_kind.rows_per_scale > 1 and "kv_b_proj" in module.leaves:
        return (
            "a block-FP8 config always excludes *kv_b_proj* (_torch/model_config.py), and the MLA loader then "
            "dequantizes it from weight_scale_inv, which a BF16 kv_b_proj lacks (modeling_deepseekv3.py)"
        )
    return None


# The formats' exclusion dialects whose lists TensorRT-LLM reads into QuantConfig.exclude_modules.
_READ_DIALECTS = ("exact-or-regex", "wildcard", "fp8-native")


def _layer_prefix(head: HeadDescription, layer: int) -> str:
    return f"model.midlayer.{layer}" if head.num_layers > 1 else "model.midlayer"


def _excludes(pattern: str, candidate: str, regex: bool = True) -> bool:
    """``regex``: ``re:`` means a regular expression (main); without it, ``re:...`` is a plain glob (1.2.x)."""
    if regex and pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], candidate) is not None
    return fnmatch.fnmatchcase(candidate, pattern)


def _fused_member_names(runtime_name: str) -> list[str]:
    """``...self_attn.qkv_proj`` -> the names TensorRT-LLM also asks under: ``...self_attn.q_proj``, ..."""
    parent, _, leaf = runtime_name.rpartition(".")
    return [f"{parent}.{member}" for member in _FUSED_SPELLINGS.get(leaf, ())]


# What this release loads: (scheme kinds, format) -> Support (rendered in docs/engines.md).
_TRT_NO_QUARK = refuses("TensorRT-LLM never reads quant_method quark (_torch/model_config.py::load_hf_quant_config)")
_TRT12_NO_MLA = "TensorRT-LLM 1.2.x has no EAGLE-3 MLA draft model (_torch/models/modeling_speculative.py)"
_TRT12_NO_CT = refuses(
    "TensorRT-LLM 1.2.x does not read compressed-tensors configs (_torch/model_config.py; added on main, PR #10796)"
)
NO_DENSE_MXFP4 = refuses("TensorRT-LLM has no dense-linear MXFP4 method (MXFP4 is implemented for MoE layers only)")
CELLS: Cells = {
    (FP8_W8A8, "quark"): _TRT_NO_QUARK,
    (MXFP4_W4A4, "quark"): _TRT_NO_QUARK,
    (MXFP4_W4A16, "quark"): _TRT_NO_QUARK,
    (FP8_W8A8, "modelopt"): loads(
        "FP8_PER_CHANNEL_PER_TOKEN → FP8RowwiseLinearMethod (_torch/modules/linear.py)", mla=_TRT12_NO_MLA
    ),
    (NVFP4_W4A16, "modelopt"): refuses(
        "W4A16_NVFP4 is not a QuantAlgo in 1.2.x (quantization/mode.py; added on main, PR #15703)"
    ),
    (NVFP4_W4A4, "modelopt"): loads_if(
        "NVFP4LinearMethod: Blackwell (SM100/SM120) only", where="Blackwell", mla=_TRT12_NO_MLA
    ),
    (FP8_W8A8, "compressed-tensors"): _TRT12_NO_CT,
    (FP8_BLOCK_W8A8, "compressed-tensors"): _TRT12_NO_CT,
    (FP8_BLOCK_W8A8, "fp8"): refuses(
        "1.2.x: how it reads a native fp8 config's exclusions could not be established at the release tag "
        "(_torch/model_config.py)"
    ),
    (NVFP4_W4A16, "compressed-tensors"): _TRT12_NO_CT,
    (NVFP4_W4A4, "compressed-tensors"): _TRT12_NO_CT,
    (MXFP4_W4A4, "compressed-tensors"): _TRT12_NO_CT,
    (MXFP4_W4A16, "compressed-tensors"): _TRT12_NO_CT,
    (INT8_W8A8, "quark"): _TRT_NO_QUARK,
    (INT8_W8A8, "compressed-tensors"): _TRT12_NO_CT,
    (INT4_W4A16, "compressed-tensors"): _TRT12_NO_CT,
    (INT4_W4A16_ASYM, "compressed-tensors"): _TRT12_NO_CT,
}


class TrtllmEngine(Engine):
    """The released 1.2.x: a plain fnmatch matcher, an unquantized ``fc``, and no MLA drafts (see the module doc)."""

    name: ClassVar[str] = "trtllm"
    key: ClassVar[str] = "trtllm"
    title: ClassVar[str] = "TensorRT-LLM"
    release: ClassVar[str] = "1.2.x"
    hub_library: ClassVar[str] = "tensorrt-llm"
    cells: ClassVar[Cells] = CELLS
    matches_ancestors: ClassVar[bool] = False  # an exclude entry matching a parent module excludes the child
    reads_regex: ClassVar[bool] = False  # "re:" entries are regular expressions

    vocabulary_map_source: ClassVar[str] = (
        "Eagle3DraftModel holds d2t when draft_vocab_size differs from vocab_size "
        "(_torch/models/modeling_speculative.py)"
    )

    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        block = group.name.split(".")[2]
        return (f"{_layer_prefix(head, group.layer)}.{block}.{_RUNTIME_FUSED_NAME[group.module_type]}",)

    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        assert linear.layer is not None
        return (f"{_layer_prefix(head, linear.layer)}.{linear.module.split('.', 2)[2]}",)

    # The MLA rules below hold for the drafts main builds; 1.2.x builds no MLA draft (its cells refuse one).
    def decide(self, module: RuntimeModule, fmt: Format, kinds: KindPair, mixed: bool = False) -> ModuleDecision:
        return decided(
            self, module, fmt, kinds, mixed, kept=self._kept(module, kinds), required=_needs_block(module, kinds)
        )

    def _kept(self, module: RuntimeModule, kinds: KindPair) -> str | None:
        """Why TensorRT-LLM builds ``module`` without a quantization method whatever the config says."""
        if module.is_lm_head:
            return _LM_HEAD
        if module.is_fc and not self.fc_source:
            return _FC_12
        block_scaled = kinds.weight_kind.rows_per_scale > 1  # what the MLA loader takes (weight_scale_inv)
        for member in module.members:
            reason = _MLA_BF16_ONLY.get(member.rsplit(".", 1)[-1])
            if reason is not None and not block_scaled:
                return reason
        return None

    def pattern_problems(
        self, head: HeadDescription, fmt: Format, patterns: list[str], kinds: KindPair | None = None
    ) -> list[str]:
        return []  # 1.2.x has no MLA draft, so no kv_b_proj leaf question

    def dialects(self) -> dict[str, Dialect]:
        # One matcher (QuantConfig.is_module_excluded_from_quantization) whatever the format; runtime names do not
        # depend on the target's layer count here.
        dialect = Dialect(self._excluding_pattern, lambda name, any_layer: (name,))
        return dict.fromkeys(_READ_DIALECTS, dialect)

    def _excluding_pattern(self, runtime_name: str, patterns: list[str]) -> str | None:
        parts = runtime_name.split(".")
        ancestors = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)] if self.matches_ancestors else []
        candidates = [runtime_name, *ancestors, *_fused_member_names(runtime_name)]
        for pattern in patterns:
            if any(_excludes(pattern, candidate, self.reads_regex) for candidate in candidates):
                return pattern
        return None

    def serving_snippets(self, target: str, draft: str, draft_tokens: int) -> list[ServingSnippet]:
        config = (
            "speculative_config:\n"
            "  decoding_type: Eagle\n"
            f"  max_draft_len: {draft_tokens}\n"
            f"  speculative_model_dir: {draft}\n"
        )
        return [
            ServingSnippet("TensorRT-LLM: extra-llm-api-config.yml", "yaml", config),
            ServingSnippet(
                "TensorRT-LLM", "bash", f"trtllm-serve {target} --extra_llm_api_options extra-llm-api-config.yml"
            ),
        ]
