"""INT8 W8A8: symmetric INT8 weights with one scale per output row, and dynamic symmetric INT8 activations with
one scale per token, quantized by the engine at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eaglequant.kinds.base import ActivationCodes, ActivationKind, KernelLayout, WeightKind

if TYPE_CHECKING:
    import torch

    from eaglequant.kinds.base import StoredLinear

INT8_BITS = 8


@dataclass(frozen=True)
class Int8ChannelKind(WeightKind):
    """``weight`` int8 [N, K]; ``channel_scale`` float32 [N]."""

    kernel_layout: ClassVar[KernelLayout] = KernelLayout.INT8_ROWS

    @property
    def bits(self) -> int:
        return INT8_BITS

    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        from eaglequant.numerics.int8 import dequantize_per_channel

        assert stored.channel_scale is not None
        return dequantize_per_channel(stored.weight[rows], stored.channel_scale[rows])


@dataclass(frozen=True)
class Int8TokenKind(ActivationKind):
    """Dynamic symmetric INT8, one float32 scale (amax / 127) per token; an all-zero token's amax is floored at
    ``min_scale`` * 127."""

    simulated: ClassVar[bool] = True
    kernel_codes: ClassVar[ActivationCodes] = ActivationCodes.INT8

    @property
    def bits(self) -> int:
        return INT8_BITS

    def simulate(self, x: torch.Tensor) -> torch.Tensor:
        from eaglequant.numerics.int8 import simulate_tokens

        return simulate_tokens(x)


INT8_CHANNEL = Int8ChannelKind(
    "int8-channel",
    "int8",
    "channel",
    None,
    "float32",
    False,
    "INT8 symmetric, one scale per row",
    activations=("int8-token",),
    stored_dtype="I8",
    tag="int8",
)
INT8_TOKEN = Int8TokenKind(
    "int8-token",
    "int8",
    "token",
    None,
    "float32",
    False,
    "INT8 symmetric, one scale per token at run time",
    min_scale=1e-10 / 127.0,  # numerics.int8.MIN_TOKEN_AMAX / 127
)
