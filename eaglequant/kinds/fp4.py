"""FP4 E2M1 weight kinds: two codes per byte (even element in the low nibble), a scale per block of 16 or 32
along the in-dimension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eaglequant.kinds.base import KernelLayout, WeightKind

if TYPE_CHECKING:
    import torch

    from eaglequant.kinds.base import StoredLinear


@dataclass(frozen=True)
class Nvfp4Kind(WeightKind):
    """``weight`` uint8 [N, K/2]; ``block_scale`` float8_e4m3fn [N, K/16]; ``global_scale`` float32 0-dim,
    multiplied into the output."""

    kernel_layout: ClassVar[KernelLayout] = KernelLayout.NVFP4

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        from eaglequant.numerics.nvfp4 import dequantize

        assert stored.block_scale is not None and stored.global_scale is not None
        return dequantize(stored.weight[rows], stored.block_scale[rows], stored.global_scale)


@dataclass(frozen=True)
class Mxfp4Kind(WeightKind):
    """``weight`` uint8 [N, K/2]; ``block_scale`` uint8 E8M0 [N, K/32]."""

    kernel_layout: ClassVar[KernelLayout] = KernelLayout.MXFP4

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        from eaglequant.numerics.mxfp4 import dequantize

        assert stored.block_scale is not None
        return dequantize(stored.weight[rows], stored.block_scale[rows])


_PACKED = {"stored_dtype": "U8", "codes_per_element": 2}
NVFP4 = Nvfp4Kind(
    "nvfp4",
    "fp4_e2m1",
    "block",
    16,
    "fp8_e4m3",
    True,
    "FP4 E2M1, FP8 scale per 16, float32 global scale",
    activations=("nvfp4",),
    columns_per_scale=16,
    tag="nvfp4",
    **_PACKED,  # type: ignore[arg-type]
)
MXFP4 = Mxfp4Kind(
    "mxfp4",
    "fp4_e2m1",
    "block",
    32,
    "e8m0",
    False,
    "FP4 E2M1, power-of-two (E8M0) scale per 32",
    activations=("mxfp4",),
    columns_per_scale=32,
    tag="mxfp4",
    **_PACKED,  # type: ignore[arg-type]
)
