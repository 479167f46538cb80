"""TensorRT-LLM main (the main branch as read in 2026): the 1.2.x release (``trtllm.py``) with what changed since.

main (2026), in addition:
- The matcher also tries every ancestor of the name, and ``re:`` + ``re.fullmatch`` (PR #13844, 2026-05).
- ``fc`` is built with the draft's quant config.
- ``models/modeling_deepseekv3.py::DeepseekV3WeightLoader`` (MLA drafts): ``kv_b_proj`` is split into
  ``k_b_proj_trans`` / ``v_b_proj``, which only BF16 or block-FP8 (``weight_scale_inv``) feed; the fused
  q_a + kv_a weight is concatenated and gets a scale only from ``weight_scale_inv`` (its NVFP4 path exists
  on the newest main only). Whether ``kv_b_proj`` is excluded is asked with the bare leaf name
  ``kv_b_proj``; a rule matching it sends a BF16 kv_b_proj down the block-FP8 dequant path (KeyError).
  So under block FP8 these two are stored block-FP8 (kv_b_proj must be: the config's default exclusion sends it
  down the dequant path), and under any other scheme BF16.
"""

from __future__ import annotations

from typing import ClassVar

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
from eaglequant.engines.trtllm import CELLS as RELEASE_1_2_CELLS
from eaglequant.engines.trtllm import NO_DENSE_MXFP4, TrtllmEngine, _excludes
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention, HeadDescription

_TRT_MAIN_NO_INT4 = refuses(
    "main maps 4-bit compressed-tensors groups to float formats only: an INT4 group without input_activations "
    "fails reading their strategy (models/quant_config_utils.py::_quant_config_from_config_group)"
)
_CHANGED: Cells = {
    (FP8_W8A8, "modelopt"): loads("FP8_PER_CHANNEL_PER_TOKEN → FP8RowwiseLinearMethod (_torch/modules/linear.py)"),
    (NVFP4_W4A16, "modelopt"): loads(
        "W4A16_NVFP4 → W4A16NVFP4LinearMethod (_torch/modules/linear.py; main since July 2026)"
    ),
    (NVFP4_W4A4, "modelopt"): loads_if("NVFP4LinearMethod: Blackwell (SM100/SM120) only", where="Blackwell"),
    (FP8_W8A8, "compressed-tensors"): refuses(
        "its FP8 rowwise path expects a 1-D [N] weight_scale; compressed-tensors stores [N, 1]"
    ),
    (FP8_BLOCK_W8A8, "compressed-tensors"): refuses(
        "main reads a compressed-tensors config's config_groups['group_0'] only, and llm-compressor names this "
        "group FP8_BLOCK (models/quant_config_utils.py)"
    ),
    (FP8_BLOCK_W8A8, "fp8"): loads(
        "FP8_BLOCK_SCALES, exclusions from modules_to_not_convert (_torch/model_config.py); an MLA kv_b_proj is "
        "dequantized from its block scales (modeling_deepseekv3.py)"
    ),
    (NVFP4_W4A16, "compressed-tensors"): refuses(
        "main reads compressed-tensors with 8-bit weights only (_torch/model_config.py)"
    ),
    (NVFP4_W4A4, "compressed-tensors"): refuses(
        "main reads compressed-tensors with 8-bit weights only (_torch/model_config.py)"
    ),
    (MXFP4_W4A4, "compressed-tensors"): NO_DENSE_MXFP4,
    (MXFP4_W4A16, "compressed-tensors"): NO_DENSE_MXFP4,
    (INT8_W8A8, "compressed-tensors"): refuses(
        "main reads 8-bit channel weights with token activations as FP8_PER_CHANNEL_PER_TOKEN whatever their "
        "type (models/quant_config_utils.py::_quant_config_from_config_group): INT8 codes would run as FP8"
    ),
    (INT4_W4A16, "compressed-tensors"): _TRT_MAIN_NO_INT4,
    (INT4_W4A16_ASYM, "compressed-tensors"): _TRT_MAIN_NO_INT4,
}

CELLS: Cells = {**RELEASE_1_2_CELLS, **_CHANGED}


class TrtllmMainEngine(TrtllmEngine):
    key: ClassVar[str] = "trtllm-main"
    title: ClassVar[str] = "TensorRT-LLM main"
    release: ClassVar[str] = "(2026)"
    cells: ClassVar[Cells] = CELLS
    matches_ancestors: ClassVar[bool] = True
    reads_regex: ClassVar[bool] = True

    fc_source: ClassVar[str] = (
        "Eagle3DraftModel builds fc with the draft's quant config (_torch/models/modeling_speculative.py)"
    )

    def pattern_problems(
        self, head: HeadDescription, fmt: Format, patterns: list[str], kinds: KindPair | None = None
    ) -> list[str]:
        if head.attention != Attention.MLA or (kinds is not None and kinds.weight_kind.rows_per_scale > 1):
            return []  # a block-FP8 kv_b_proj is what the dequant path reads
        return [
            f"TensorRT-LLM asks whether the bare name 'kv_b_proj' is excluded, and {p!r} matches it: the BF16 "
            "kv_b_proj then goes down the block-FP8 dequant path and loading fails (weight_scale_inv missing)"
            for p in patterns
            if _excludes(p, "kv_b_proj")
        ]
