"""The head a quantized checkpoint was made from, as its headers show it.

A quantized linear is stored as an FP8 or packed FP4 weight (``weight``, or ``weight_packed`` in
compressed-tensors) plus scale tensors. Mapping each such weight back to the logical source weight
(``<module>.weight``, [N, K], source dtype) and setting the scales aside gives a checkpoint that
:func:`describe_head` reads like any source, so a written head is described by the same code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.dtypes import FLOAT_SOURCE_DTYPES, ITEMSIZE, QUANTIZED_DTYPES
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.checkpoint.safetensors_file import TensorInfo
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription

# Tensors the formats (and vendors' variants of them) store beside a quantized weight.
SCALE_PARAMS = frozenset(
    {
        "weight_scale",
        "weight_scale_2",
        "weight_scale_inv",
        "weight_global_scale",
        "weight_zero_point",
        "weight_shape",
        "input_scale",
        "input_scale_2",
        "input_global_scale",
        "input_zero_point",
    }
)
_WEIGHT_PARAMS = {"weight": "weight", "weight_packed": "weight"}
_CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


@dataclass(frozen=True)
class LogicalView:
    root: Path
    config: dict[str, Any]
    source_format: str
    tensors: dict[str, TensorInfo]


def describe_written_head(checkpoint: Checkpoint) -> HeadDescription:
    """Describe the head in a quantized ``checkpoint`` as the source it was converted from."""
    dtype = source_dtype(checkpoint)
    logical: dict[str, TensorInfo] = {}
    for name, info in checkpoint.tensors.items():
        module, _, param = name.rpartition(".")
        if param in SCALE_PARAMS:
            continue
        if param in _WEIGHT_PARAMS and info.dtype in QUANTIZED_DTYPES and len(info.shape) == 2:
            rows, cols = info.shape
            shape = (rows, cols * 2 if info.dtype == "U8" else cols)  # U8 packs two FP4 codes per byte
            name = f"{module}.{_WEIGHT_PARAMS[param]}"
            info = replace(info, name=name, dtype=dtype, shape=shape, nbytes=shape[0] * shape[1] * ITEMSIZE[dtype])
        logical[name] = info
    return describe_head(LogicalView(checkpoint.root, checkpoint.config, checkpoint.source_format, logical))


def source_dtype(checkpoint: Checkpoint) -> str:
    """The dtype the head was converted from: that of the tensors copied as they were (norms, kept
    linears), else config.json's ``torch_dtype``."""
    copied = Counter(
        info.dtype
        for name, info in checkpoint.tensors.items()
        if info.dtype in FLOAT_SOURCE_DTYPES and name.rpartition(".")[2] not in SCALE_PARAMS
    )
    if copied:
        return copied.most_common(1)[0][0]
    declared = checkpoint.config.get("torch_dtype", checkpoint.config.get("dtype"))
    return _CONFIG_DTYPES.get(declared, "BF16") if isinstance(declared, str) else "BF16"
