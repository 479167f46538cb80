"""The head a quantized checkpoint was made from, as its headers show it.

A quantized linear is stored as a weight in the kind's own dtype (FP8, INT8, packed FP4 or INT4) plus scale
tensors, under the names its format's recipe for the kind declares (``Recipe.tensors``). Mapping each
such weight back to the logical source weight (``<module>.weight``, [N, K], source dtype) and setting the scales
aside gives a checkpoint that :func:`describe_head` reads like any source, so a written head is described by the
same code. Which tensor is a quantized weight is the answer of the recipe of the format and kind the config declares
(its weight's name), its dtype and how many values one element packs the kind's, never a guess from the dtype: U8 is
packed FP4, I32 packed INT4, I8 INT8.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.dtypes import FLOAT_SOURCE_DTYPES, ITEMSIZE
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.checkpoint.safetensors_file import TensorInfo
from eaglequant.formats import all_scale_params
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription

_CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


@dataclass(frozen=True)
class LogicalView:
    root: Path
    config: dict[str, Any]
    source_format: str
    tensors: dict[str, TensorInfo]


def describe_written_head(checkpoint: Checkpoint) -> HeadDescription:
    """Describe the head in a quantized ``checkpoint`` as the source it was converted from (its config must declare a
    scheme eaglequant models: :func:`~eaglequant.readback.explanation.read_written_config`)."""
    from eaglequant.readback.explanation import read_written_config

    fmt, written = read_written_config(checkpoint)
    dtype = source_dtype(checkpoint)
    scale_params = all_scale_params()
    declared = [(kinds.weight_kind, fmt.recipe(kinds).weight) for kinds in written.declared_kinds]
    logical: dict[str, TensorInfo] = {}
    for name, info in checkpoint.tensors.items():
        module, _, param = name.rpartition(".")
        if param in scale_params:
            continue
        # a per-module config names its modules by runtime names, known only once the head is: here a weight is
        # read in the declared kinds whose recipe stores it so; explain then holds each module to its own kinds
        stored_as = (k for k, weight in declared if param == weight.suffix and info.dtype == k.stored_dtype)
        kind = next(stored_as, None) if module else None
        if kind is not None and len(info.shape) == 2:
            rows, cols = info.shape
            shape = (rows, kind.in_features(cols))
            name = f"{module}.weight"
            info = replace(info, name=name, dtype=dtype, shape=shape, nbytes=shape[0] * shape[1] * ITEMSIZE[dtype])
        logical[name] = info
    return describe_head(LogicalView(checkpoint.root, checkpoint.config, checkpoint.source_format, logical))


def source_dtype(checkpoint: Checkpoint) -> str:
    """The dtype the head was converted from: that of the tensors copied as they were (norms, kept
    linears), else config.json's ``torch_dtype``."""
    copied = Counter(
        info.dtype
        for name, info in checkpoint.tensors.items()
        if info.dtype in FLOAT_SOURCE_DTYPES and name.rpartition(".")[2] not in all_scale_params()
    )
    if copied:
        return copied.most_common(1)[0][0]
    declared = checkpoint.config.get("torch_dtype", checkpoint.config.get("dtype"))
    return _CONFIG_DTYPES.get(declared, "BF16") if isinstance(declared, str) else "BF16"
