"""Safetensors dtype strings, their sizes, and their torch dtypes (torch imported lazily)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Bytes per element for every dtype string the safetensors format defines that we can carry.
ITEMSIZE: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

# Source dtypes a weight to be quantized may have.
FLOAT_SOURCE_DTYPES = frozenset({"BF16", "F16", "F32"})
QUANTIZED_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "U8"})

_TORCH_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "I64": "int64",
    "U64": "uint64",
    "F64": "float64",
}


def to_torch(dtype: str) -> torch.dtype:
    import torch

    dtype_obj: torch.dtype = getattr(torch, _TORCH_NAMES[dtype])
    return dtype_obj


def from_torch(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    for key, torch_name in _TORCH_NAMES.items():
        if torch_name == name:
            return key
    raise ValueError(f"no safetensors dtype for {dtype}")
