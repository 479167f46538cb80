"""FP8 E4M3 weight kinds: one float32 scale per output row, or per 128 x 128 block."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from eaglequant.kinds.base import KernelLayout, WeightKind

if TYPE_CHECKING:
    import torch

    from eaglequant.kinds.base import StoredLinear


@dataclass(frozen=True)
class Fp8ChannelKind(WeightKind):
    """``weight`` float8_e4m3fn [N, K]; ``channel_scale`` float32 [N]."""

    kernel_layout: ClassVar[KernelLayout] = KernelLayout.FP8_ROWS

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        from eaglequant.numerics.fp8 import dequantize_per_channel

        assert stored.channel_scale is not None
        return dequantize_per_channel(stored.weight[rows], stored.channel_scale[rows])


@dataclass(frozen=True)
class Fp8BlockKind(WeightKind):
    """``weight`` float8_e4m3fn [N, K]; ``block_scale`` float32 [ceil(N/128), K/128] (a last block of rows may be
    partial)."""

    kernel_layout: ClassVar[KernelLayout] = KernelLayout.FP8_BLOCKS

    @property
    def block(self) -> int:
        return self.rows_per_scale

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        import torch

        from eaglequant.numerics.fp8 import e4m3_to_float32

        assert stored.block_scale is not None
        start, stop, _ = rows.indices(stored.out_features)
        values = e4m3_to_float32(stored.weight[start:stop])  # a new tensor: scaled in place
        count, columns = values.shape
        blocks = -(-columns // self.block)
        scale = stored.block_scale[start // self.block : -(-stop // self.block)].to(torch.float32)
        scale = scale.repeat_interleave(self.block, 0)[start % self.block :][:count]  # [rows, column blocks]
        if columns % self.block:
            values = torch.nn.functional.pad(values, (0, blocks * self.block - columns))
        scaled = values.view(count, blocks, self.block).mul_(scale[:, :, None])
        return scaled.view(count, blocks * self.block)[:, :columns]

    def select_rows(self, stored: StoredLinear, rows: slice) -> StoredLinear:
        start, stop, _ = rows.indices(stored.out_features)
        if start % self.block:
            raise ValueError(f"rows {start}:{stop} do not start on a {self.block}-row scale block")
        assert stored.block_scale is not None
        scale = stored.block_scale[start // self.block : -(-stop // self.block)]
        return replace(stored, weight=stored.weight[start:stop], block_scale=scale)


FP8_CHANNEL = Fp8ChannelKind(
    "fp8-channel",
    "fp8_e4m3",
    "channel",
    None,
    "float32",
    False,
    "FP8 E4M3, one float32 scale per row",
    activations=("fp8-token",),
    tag="fp8",
)
FP8_BLOCK = Fp8BlockKind(
    "fp8-block",
    "fp8_e4m3",
    "block",
    (128, 128),
    "float32",
    False,
    "FP8 E4M3, one float32 scale per 128x128 block",
    activations=("fp8-group",),
    rows_per_scale=128,
    columns_per_scale=128,  # K % 128 == 0: engines quantize activations in groups of 128 (per_token_group_quant_fp8)
    tag="fp8",
)
