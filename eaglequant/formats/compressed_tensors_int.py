"""compressed-tensors recipes for the integer kinds, as llm-compressor 0.14's ``model_free_ptq`` writes them
(``W8A8``, ``W4A16``, ``W4A16_ASYM`` presets; compressed-tensors 0.19):

- INT8 W8A8 (``int-quantized``): ``weight`` I8 [N, K], ``weight_scale`` in the weight dtype, [N, 1]; no zero point
  (symmetric); activations INT8 per token at run time.
- INT4 W4A16 (``pack-quantized``): ``weight_packed`` I32 [N, K/8] (eight codes per int32, first in the low nibble),
  ``weight_scale`` in the weight dtype, [N, K/128], ``weight_shape`` I64 [2] = [N, K]; the asymmetric kind adds
  ``weight_zero_point`` I32 [N/8, K/128] (packed along the out-dimension).

compressed-tensors refuses an in-dimension that is not a multiple of 128 for groups of 128, so such linears stay
unquantized (the kind's ``columns_per_scale``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.formats.base import GroupScales
from eaglequant.formats.compressed_tensors_args import CtRecipe, PerChannelRecipe, ct_args
from eaglequant.formats.stored_tensors import (
    DtypeOf,
    StoredTensor,
    as_float32,
    dimensions,
    per_group,
    per_row_block_group,
    unpacked_zero_points,
    weight_codes,
)
from eaglequant.kinds import INT4_GROUP, INT4_GROUP_ASYM, INT8_CHANNEL, WeightKind
from eaglequant.kinds.int4 import Int4GroupKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch


class Int8Channel(PerChannelRecipe):
    kind: ClassVar[WeightKind] = INT8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"int8-token": "W8A8"}
    compression_format: ClassVar[str] = "int-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "channel", dynamic=False, number_type="int")
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "int8-token": ct_args(8, "token", dynamic=True, number_type="int")
    }

    def channel_math(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        from eaglequant.numerics import int8

        return int8.compressed_tensors_per_channel


class Int4Group(CtRecipe):
    kind: ClassVar[WeightKind] = INT4_GROUP
    algorithms: ClassVar[dict[str | None, str]] = {None: "W4A16"}
    compression_format: ClassVar[str] = "pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "group", dynamic=False, group_size=INT4_GROUP.columns_per_scale, number_type="int"
    )
    input_args: ClassVar[dict[str, dict[str, Any]]] = {}
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes("weight_packed"),
        StoredTensor("weight_scale", DtypeOf.LINEAR, per_group, feeds="block_scale", read=as_float32),
        StoredTensor("weight_shape", "I64", dimensions, metadata=True),  # the whole linear's, in every block of rows
    )

    @property
    def zero_points(self) -> bool:
        """The kind's own flag: asymmetric, a zero point per group."""
        assert isinstance(self.kind, Int4GroupKind)
        return self.kind.zero_points

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        import torch

        from eaglequant.numerics import int4

        packed, scale, zero = int4.compressed_tensors_quantize(weight, symmetric=not self.zero_points)
        shape = torch.tensor([linear.out_features, linear.in_features], dtype=torch.int64)
        return (packed, scale, shape) if zero is None else (packed, scale, shape, int4.pack_zero_points(zero))


class Int4GroupAsym(Int4Group):
    kind: ClassVar[WeightKind] = INT4_GROUP_ASYM
    algorithms: ClassVar[dict[str | None, str]] = {None: "W4A16_ASYM"}
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "group", dynamic=False, group_size=INT4_GROUP_ASYM.columns_per_scale, number_type="int", symmetric=False
    )
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        *Int4Group.tensors,
        # packed along the out-dimension, a block of eight rows to an int32
        StoredTensor("weight_zero_point", "I32", per_row_block_group, feeds="zero_point", read=unpacked_zero_points),
    )
