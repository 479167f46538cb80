"""INT4 W4A16 weight kinds: eight 4-bit codes per int32 (compressed-tensors' ``pack-quantized``), one scale per
group of 128 in-features; symmetric (``int4``: codes -8..7) or asymmetric (``uint4``: a zero point per group,
subtracted before scaling, as vLLM's ``uint4`` scalar type reads it). Activations stay in the model dtype.

The two are separate kinds (and scheme files) because they store different tensors and engines pick different
kernels for them; a scheme file tells them apart by ``dtype`` (``int4`` / ``uint4``), as vLLM's scalar types do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eaglequant.common.findings import Finding
from eaglequant.kinds.base import KernelLayout, WeightKind

if TYPE_CHECKING:
    import torch

    from eaglequant.kinds.base import StoredLinear

INT4_BITS = 4
PACKED_ROWS = 8  # int4 values per int32: engines' int4 kernels need out-features in multiples of it


@dataclass(frozen=True)
class Int4GroupKind(WeightKind):
    """``weight`` int32 [N, K/8] (packed codes); ``block_scale`` float32 [N, K/128]; ``zero_point`` int8 [N, K/128]
    for the asymmetric kind (codes and zero points as stored, less the packing's offset of 8)."""

    zero_points: bool = False  # asymmetric: one zero point per group, stored beside the scale
    kernel_layout: ClassVar[KernelLayout] = KernelLayout.INT4_GROUPS

    @property
    def bits(self) -> int:
        return INT4_BITS

    def shape_problem(self, out_features: int, in_features: int, fused_before_last: bool) -> Finding | None:
        if out_features % PACKED_ROWS:
            text = (
                f"out-features {out_features} is not a multiple of {PACKED_ROWS}, which the engines' INT4 kernels need "
                "(vLLM: TritonW4A16LinearKernel / ExllamaLinearKernel.can_implement)"
            )
            return Finding("rows-not-packable", "", text)
        return super().shape_problem(out_features, in_features, fused_before_last)

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        from eaglequant.numerics.int4 import dequantize

        assert stored.block_scale is not None
        zero = None if stored.zero_point is None else stored.zero_point[rows]
        return dequantize(stored.weight[rows], stored.block_scale[rows], zero)

    def select_rows(self, stored: StoredLinear, rows: slice) -> StoredLinear:
        start, stop, _ = rows.indices(stored.out_features)
        if start % self.rows_per_scale:
            raise ValueError(f"rows {start}:{stop} do not start on a {self.rows_per_scale}-row block of zero points")
        return super().select_rows(stored, rows)


_PACKED = {"stored_dtype": "I32", "codes_per_element": PACKED_ROWS, "columns_per_scale": 128, "tag": "int4"}
INT4_GROUP = Int4GroupKind(
    "int4-group",
    "int4",
    "group",
    128,
    "float32",
    False,
    "INT4 symmetric, one scale per 128",
    **_PACKED,  # type: ignore[arg-type]
)
INT4_GROUP_ASYM = Int4GroupKind(
    "int4-group-asym",
    "uint4",
    "group",
    128,
    "float32",
    False,
    "INT4 asymmetric, one scale and zero point per 128",
    # 8 rows share a packed int32 of zero points: a block of rows is quantized whole, and engines concatenate a
    # fused module's packed zero-point rows (vLLM: PackedvLLMParameter, packed_dim 0)
    rows_per_scale=PACKED_ROWS,
    zero_points=True,
    **_PACKED,  # type: ignore[arg-type]
)
