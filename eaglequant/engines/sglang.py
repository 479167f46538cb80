"""SGLang: runtime names of an EAGLE-3 draft and its exclusion rules.

Describes SGLang 0.5.23, whose own loader the engine-load tests run on every fixture.
Sources (sgl-project/sglang v0.5.23, ``python/sglang/srt``):
- ``models/llama_eagle3.py``: every draft decoder layer is built with the *model's* prefix (``model``),
  not ``model.layers.{i}``, so its modules are ``model.qkv_proj`` (override; the base ``model.self_attn.qkv_proj``
  and ``model.mlp.gate_up_proj`` are built first and replaced), ``model.self_attn.o_proj``,
  ``model.gate_up_proj``, ``model.down_proj`` whatever the layer; ``fc`` is a plain ``torch.nn.Linear``,
  never quantized; ``lm_head`` is a ParallelLMHead, which the Quark and compressed-tensors configs give no
  quantization method; ``layers/quantization/modelopt_quant.py`` does claim it, so a ModelOpt config must
  exclude ``lm_head`` to keep it BF16.
- ``models/kimi_k25_eagle3.py`` (MLA, one layer): ``model.self_attn.fused_qkv_a_proj_with_mqa`` (q_a + kv_a),
  ``model.self_attn.q_b_proj`` / ``kv_b_proj`` / ``o_proj``, ``model.mlp.gate_up_proj`` / ``down_proj``;
  ``fc`` is a ColumnParallelLinear at ``model.fc`` built with the quant config. Its ``post_load_weights``
  splits ``kv_b_proj`` into ``w_kc`` / ``w_vc`` and raises NotImplementedError for any non-float weight, so
  ``kv_b_proj`` must stay BF16; the fused q_a + kv_a loader concatenates its members' tensors, so per-tensor
  global scales (NVFP4 ``weight_global_scale`` / ``weight_scale_2``) do not fit its one-element parameter
  (AssertionError): under NVFP4, q_a + kv_a stay BF16 too.
- ``layers/quantization/quark/utils.py::should_ignore_layer`` and compressed-tensors: exact, or ``re:`` +
  ``re.match``. ``layers/quantization/modelopt_quant.py::is_layer_excluded``: a glob (``*`` → ``.*``)
  full-matched against the whole name or any one dot-separated part, plus a fused-MLA rule (a pattern
  ending in q_a_proj / q_b_proj / kv_a_proj_with_mqa / kv_b_proj excludes a module whose last part
  contains that name).
- ``layers/quantization/fp8.py::Fp8Config`` (the native ``fp8`` format): the first of ``ignored_layers`` and
  ``modules_to_not_convert`` present; ``utils.py::is_layer_skipped``: an entry (with and without ``model.``)
  excludes a name it equals, an ancestor of it, or a run of its dotted parts; ``qkv_proj`` and ``gate_up_proj``
  are asked under their shards' names only (``model.q_proj`` ...), all of which must agree. Block FP8 needs
  every member of a merged module to have a multiple of 128 rows (``Fp8LinearMethod.validate_block_quant_shapes``),
  and an MLA ``kv_b_proj`` stored in FP8 fails ``post_load_weights``; quantized, a BF16 one is refused at load
  ("Downcasting not allowed"), so it is kept BF16 *and* excluded. Seen by loading with SGLang 0.5.23.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from eaglequant.engines.base import (
    Dialect,
    Engine,
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
    refuses,
)
from eaglequant.engines.decision import ModuleDecision
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention, FusedGroup, HeadDescription, HeadLinear

# The Llama draft's layer first builds the base LlamaAttention / LlamaMLP modules (``model.self_attn.qkv_proj``,
# ``model.mlp.gate_up_proj``), then replaces them: a quantization method whose weights cannot be created for the
# base one (block FP8 on unaligned shards) fails the load, so rules cover both names.
_LLAMA_FUSED = {
    "qkv_proj": ("model.qkv_proj", "model.self_attn.qkv_proj"),
    "gate_up_proj": ("model.gate_up_proj", "model.mlp.gate_up_proj"),
}
_MLA_FUSED = {
    "fused_qkv_a_proj": ("model.self_attn.fused_qkv_a_proj_with_mqa",),
    "gate_up_proj": ("model.mlp.gate_up_proj",),
}
_MLA_FUSED_TAILS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")


_MLA_KV_B = (
    "SGLang's MLA draft splits kv_b_proj in post_load_weights, which takes float weights only "
    "(models/kimi_k25_eagle3.py: NotImplementedError for a quantized one)"
)
_LLAMA_FC = "SGLang builds a Llama draft's fc as a plain torch.nn.Linear (models/llama_eagle3.py)"
_MLA_FUSED_GLOBAL_SCALE = (
    "SGLang's MLA draft loads q_a + kv_a as one fused module whose per-tensor global scale cannot take two "
    "members' (models/kimi_k25_eagle3.py fused loader: AssertionError)"
)
# configs/model_config.py builds the draft from config.json's architectures; these are its EAGLE-3 drafts
# (models/llama_eagle3.py, models/kimi_k25_eagle3.py EntryClass).
_EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")


# What this release loads: (scheme kinds, format) -> Support (rendered in docs/engines.md).
_SGL_NO_MLA_FP4 = "SGLang's models/kimi_k25_eagle3.py drops modelopt_fp4 configs"
_SGL_WNA16 = (
    "CompressedTensorsWNA16 runs Marlin only (schemes/compressed_tensors_wNa16.py): CUDA SM80+, whose tiles need "
    "every module's out-features a multiple of 64 and in-features of 128 (marlin_utils.py::"
    "verify_marlin_supports_shape; process_weights_after_loading ignores the check's answer); no CPU or ROCm path"
)
CELLS: Cells = {
    (FP8_W8A8, "quark"): loads("QuarkW8A8Fp8 (srt/layers/quantization/quark/quark.py); SM89+ or ROCm"),
    (MXFP4_W4A4, "quark"): loads_if("Quark W4A4 MXFP4 runs on ROCm only (AITER kernels)", where="ROCm only"),
    (MXFP4_W4A16, "quark"): refuses("SGLang's Quark MXFP4 requires FP4 activations"),
    (FP8_W8A8, "modelopt"): refuses("ModelOptFp8Config accepts only per-tensor FP8 (modelopt_quant.py::from_config)"),
    (NVFP4_W4A16, "modelopt"): loads("ModelOptFp4Config W4A16_NVFP4 (Marlin, SM80+)", mla=_SGL_NO_MLA_FP4),
    (NVFP4_W4A4, "modelopt"): loads_if(
        "ModelOptFp4Config: native on SM100+, weight-only Marlin on SM80-90",
        where="W4A4 on SM100+",
        mla=_SGL_NO_MLA_FP4,
    ),
    (FP8_W8A8, "compressed-tensors"): loads("CompressedTensorsW8A8Fp8 (srt/layers/quantization/compressed_tensors)"),
    (FP8_BLOCK_W8A8, "compressed-tensors"): loads(
        "CompressedTensorsW8A8Fp8, block strategy (schemes/compressed_tensors_w8a8_fp8.py)"
    ),
    (FP8_BLOCK_W8A8, "fp8"): loads("Fp8Config with weight_block_size (srt/layers/quantization/fp8.py)"),
    (NVFP4_W4A16, "compressed-tensors"): loads("CompressedTensorsW4A16Fp4 (Marlin, SM80+)"),
    (NVFP4_W4A4, "compressed-tensors"): loads_if(
        "CompressedTensorsW4A4Fp4: native on SM100+, weight-only Marlin below", where="W4A4 on SM100+"
    ),
    (MXFP4_W4A4, "compressed-tensors"): refuses("SGLang's compressed_tensors has no dense MXFP4 scheme"),
    (MXFP4_W4A16, "compressed-tensors"): refuses("SGLang's compressed_tensors has no dense MXFP4 scheme"),
    (INT8_W8A8, "quark"): refuses(
        "SGLang's Quark config has W8A8 FP8 and MXFP4 schemes only; INT8 raises NotImplementedError "
        "(srt/layers/quantization/quark/quark.py::_get_scheme_from_config)"
    ),
    (INT8_W8A8, "compressed-tensors"): loads(
        "CompressedTensorsW8A8Int8 (compressed_tensors.py::_is_dynamic_token_w8a8; "
        "schemes/compressed_tensors_w8a8_int8.py): CUDA (sgl-kernel int8_scaled_mm)"
    ),
    (INT4_W4A16, "compressed-tensors"): loads_if(_SGL_WNA16, where="CUDA SM80+"),
    (INT4_W4A16_ASYM, "compressed-tensors"): loads_if(
        f"{_SGL_WNA16}; zero points through Marlin's uint4 path", where="CUDA SM80+"
    ),
}


class SglangEngine(Engine):
    name: ClassVar[str] = "sglang"
    key: ClassVar[str] = "sglang"
    title: ClassVar[str] = "SGLang"
    release: ClassVar[str] = "0.5.23"
    hub_library: ClassVar[str] = "sglang"
    cells: ClassVar[Cells] = CELLS
    lm_head_quant_methods: ClassVar[Mapping[str, str]] = {
        "modelopt": "layers/quantization/modelopt_quant.py gives the ParallelLMHead a quantization method"
    }
    per_module_configs: ClassVar[Mapping[str, str]] = {
        "quark": "layer_quant_config looked up by the module's runtime name before global_quant_config "
        "(layers/quantization/quark/quark.py::QuarkConfig._find_matched_config)",
        "compressed-tensors": "each config_groups entry's targets matched against the module's runtime name, names "
        "before the Linear class (layers/quantization/compressed_tensors/compressed_tensors.py::"
        "CompressedTensorsConfig.get_scheme, find_matched_target)",
    }
    per_module_elsewhere: ClassVar[str] = (
        "not established: configs/model_config.py reads MIXED_PRECISION as modelopt_mixed only when a layer is "
        "NVFP4, whose FP8 layers are per-tensor (modelopt_quant.py::ModelOptMixedPrecisionConfig), and no "
        "engine-load test has loaded such a draft"
    )
    fc_source: ClassVar[str] = (
        "an MLA draft's fc is a ColumnParallelLinear built with the quant config (models/kimi_k25_eagle3.py)"
    )
    vocabulary_map_source: ClassVar[str] = (
        "d2t loads as hot_token_id, the target ids of the draft's tokens (models/llama_eagle3.py, kimi_k25_eagle3.py)"
    )

    def _unbuilt(self, head: HeadDescription) -> str | None:
        architectures = head.config.get("architectures")
        architecture = architectures[0] if isinstance(architectures, list) and architectures else None
        if architecture not in _EAGLE3_ARCHITECTURES or not head.config.get("model_type"):
            return (
                f"SGLang builds the draft class config.json names, and {architecture!r} "
                f"(model_type {head.config.get('model_type')!r}) is not one of its EAGLE-3 drafts "
                f"({', '.join(_EAGLE3_ARCHITECTURES)}; configs/model_config.py)"
            )
        own_head = "lm_head" in head.features or head.config.get("tie_word_embeddings")
        if not own_head and head.config.get("draft_vocab_size") is not None:
            return (
                "the head has no lm_head and config.json sets draft_vocab_size, so SGLang builds a draft lm_head "
                "it never loads (models/llama_eagle3.py, kimi_k25_eagle3.py: the target's is used only when "
                "draft_vocab_size is unset)"
            )
        return None

    def decide(self, module: RuntimeModule, fmt: Format, kinds: KindPair, mixed: bool = False) -> ModuleDecision:
        refusal = _load_refusal(module, kinds, fmt) or _base_qkv_refusal(module, kinds, fmt)
        return decided(self, module, fmt, kinds, mixed, kept=self._kept(module, fmt, kinds), refusal=refusal)

    def _kept(self, module: RuntimeModule, fmt: Format, kinds: KindPair) -> str | None:
        """Why SGLang builds ``module`` without a quantization method whatever the config says."""
        if module.is_lm_head:
            return lm_head_config_kept(self, fmt)
        if module.is_fc:
            return None if module.attention == Attention.MLA else _LLAMA_FC
        leaves = module.leaves
        if "kv_b_proj" in leaves and kinds.weight_kind.rows_per_scale == 1:
            return _MLA_KV_B
        if "q_a_proj" in leaves and kinds.weight_kind.global_scale:
            return _MLA_FUSED_GLOBAL_SCALE
        return None

    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        return (_MLA_FUSED if head.attention == Attention.MLA else _LLAMA_FUSED)[group.module_type]

    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        local = linear.module.split(".", 2)[2]  # "self_attn.o_proj", "mlp.down_proj"
        if head.attention != Attention.MLA:
            local = local.removeprefix("mlp.")
        return (f"model.{local}",)

    def dialects(self) -> dict[str, Dialect]:
        # Runtime names do not depend on the target's layer count here, so any_layer changes nothing.
        return {
            "exact-or-regex": Dialect(exact_or_regex_rule, lambda name, any_layer: (f"re:^{re.escape(name)}$",)),
            "wildcard": Dialect(_modelopt_rule, lambda name, any_layer: (name,)),
            "fp8-native": Dialect(_fp8_rule, lambda name, any_layer: tuple(_shard_names(name))),
        }

    def serving_snippets(self, target: str, draft: str, draft_tokens: int) -> list[ServingSnippet]:
        line = (
            f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {draft} --speculative-num-steps {draft_tokens} "
            f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {draft_tokens + 1}"
        )
        return [ServingSnippet("SGLang", "bash", line)]


def _load_refusal(module: RuntimeModule, kinds: KindPair, fmt: Format) -> str | None:
    """Why SGLang fails to load ``module`` stored in ``kinds``."""
    kind = kinds.weight_kind
    leaves = module.leaves
    if "q_a_proj" in leaves:
        metadata = _per_linear_metadata(kinds, fmt)
        if metadata:
            return (
                "SGLang's MLA draft loads q_a + kv_a as one fused module by concatenating its members' tensors, "
                f"and {fmt.title} stores {', '.join(metadata)} whole per linear "
                "(models/kimi_k25_eagle3.py fused loader: AssertionError)"
            )
    if kind.rows_per_scale == 1:
        return None
    if "kv_b_proj" in leaves:
        return _MLA_KV_B
    merged = _MERGED_SHARDS.get(module.names[0].rsplit(".", 1)[-1])
    if merged and any(rows % kind.rows_per_scale for rows in module.out_features):
        return (
            f"SGLang's block-FP8 method needs every member of a merged {module.names[0]} to have a multiple of "
            f"{kind.rows_per_scale} rows, the last included (fp8.py::validate_block_quant_shapes)"
        )
    return None


def _base_qkv_refusal(module: RuntimeModule, kinds: KindPair, fmt: Format) -> str | None:
    group = base_qkv_partial_group(module, kinds, fmt)
    if group is None:
        return None
    return (
        "SGLang's Llama draft first builds the base model.self_attn.qkv_proj for the hidden size "
        f"({module.hidden_size}), and its integer weight-only method asserts in-features that are a multiple of "
        f"{group} (compressed_tensors_wNa16.py::create_weights)"
    )


def _per_linear_metadata(kinds: KindPair, fmt: Format) -> tuple[str, ...]:
    from eaglequant.schemes.model import default_scheme_for

    scheme = default_scheme_for(kinds)
    return fmt.recipe(scheme.kinds).per_linear_metadata if fmt.supports(scheme) else ()


# quantization/utils.py::is_layer_skipped resolves these fused modules to their shards whatever the config says
# (_FALLBACK_FUSED_SHARDS), and never matches the fused name itself.
_MERGED_SHARDS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _shard_names(runtime_name: str) -> list[str]:
    parent, _, leaf = runtime_name.rpartition(".")
    return [f"{parent}.{shard}" for shard in _MERGED_SHARDS.get(leaf, ())] or [runtime_name]


def _fp8_path_match(pattern: str, name: str) -> bool:
    """utils.py::_module_path_match, each entry taken with and without its ``model.`` prefix (Fp8Config)."""
    bare = pattern.removeprefix("model.")
    for entry in (bare, f"model.{bare}"):
        if name == entry or name.startswith(f"{entry}.") or f".{entry}." in f".{name}.":
            return True
    return False


def _fp8_rule(runtime_name: str, patterns: list[str]) -> str | None:
    """Fp8Config (``ignored_layers``, else ``modules_to_not_convert``): a merged module is excluded when every shard
    is (SGLang raises when only some are); other modules by their own name."""
    chosen = []
    for shard in _shard_names(runtime_name):
        rule = next((p for p in patterns if _fp8_path_match(p, shard)), None)
        if rule is None:
            return None
        chosen.append(rule)
    return chosen[0]


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
