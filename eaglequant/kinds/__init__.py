"""Quantization kinds, registered by name: every weight kind and activation kind a scheme can reduce to.

Add a kind by adding one module (a :class:`WeightKind` or :class:`ActivationKind` instance) and one entry
here; formats then declare a recipe for it, and everything else (scheme files, kernels, verification, the
support matrix) reads its properties from the object.
"""

from __future__ import annotations

from eaglequant.kinds.activations import FP8_GROUP, FP8_TOKEN, MXFP4_ACTIVATIONS, NVFP4_ACTIVATIONS
from eaglequant.kinds.base import (
    ACTIVATION_KINDS,
    WEIGHT_KINDS,
    ActivationKind,
    KindPair,
    StoredLinear,
    TensorKind,
    WeightKind,
    activation_kind,
    weight_kind,
)
from eaglequant.kinds.fp4 import MXFP4, NVFP4
from eaglequant.kinds.fp8 import FP8_BLOCK, FP8_CHANNEL
from eaglequant.kinds.int4 import INT4_GROUP, INT4_GROUP_ASYM
from eaglequant.kinds.int8 import INT8_CHANNEL, INT8_TOKEN

WEIGHT_KINDS.update(
    (kind.name, kind) for kind in (FP8_CHANNEL, FP8_BLOCK, NVFP4, MXFP4, INT8_CHANNEL, INT4_GROUP, INT4_GROUP_ASYM)
)
ACTIVATION_KINDS.update(
    (kind.name, kind) for kind in (FP8_TOKEN, FP8_GROUP, NVFP4_ACTIVATIONS, MXFP4_ACTIVATIONS, INT8_TOKEN)
)


def kinds_label(kinds: KindPair) -> str:
    """The widths serving engineers name a scheme by: ``W8A8``, ``W4A16``."""
    act = kinds.activation_kind
    return f"W{kinds.weight_kind.bits}A{16 if act is None else act.bits}"


def kinds_title(kinds: KindPair) -> str:
    """``W8A8 fp8-channel``, ``W4A16 nvfp4``: the widths and the weight kind."""
    return f"{kinds_label(kinds)} {kinds.weight}"


__all__ = [
    "ACTIVATION_KINDS",
    "FP8_BLOCK",
    "FP8_CHANNEL",
    "FP8_GROUP",
    "FP8_TOKEN",
    "INT4_GROUP",
    "INT4_GROUP_ASYM",
    "INT8_CHANNEL",
    "INT8_TOKEN",
    "MXFP4",
    "MXFP4_ACTIVATIONS",
    "NVFP4",
    "NVFP4_ACTIVATIONS",
    "WEIGHT_KINDS",
    "ActivationKind",
    "KindPair",
    "StoredLinear",
    "TensorKind",
    "WeightKind",
    "activation_kind",
    "kinds_label",
    "kinds_title",
    "weight_kind",
]
