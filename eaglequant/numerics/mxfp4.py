"""MXFP4 (OCP Microscaling v1.0): E2M1 elements in blocks of 32 along the in-dimension, one E8M0
(power-of-two) scale per block, stored as the biased exponent byte.

Both vendors use the "even" shared exponent — round the block amax up to a power of two when its
significand is at least 1.75, then floor(log2) - 2 — but differ in the details: Quark works in float32
and stores an all-zero block as byte 1 (:func:`quark_quantize`); compressed-tensors works in the
weight's own dtype, stores byte 0 (bf16, fp32) or 127 (fp16: 2^-127 underflows and becomes 1.0), and
keeps the sign of negative values that round to zero (:func:`compressed_tensors_quantize`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eaglequant.numerics.exact import floor_log2, power_of_two
from eaglequant.numerics.fp4 import E2M1_MAX, block_amax, decode_packed, e2m1_codes, pack_codes
from eaglequant.numerics.rows import by_row_blocks

BLOCK = 32
E8M0_BIAS = 127


def shared_exponents(amax: torch.Tensor) -> torch.Tensor:
    """The "even" E8M0 exponent per block (int32) from the block amax (any float dtype, >= 0).

    bits = (float32 bits of amax + 2^21) & exponent mask, i.e. the mantissa rounded up at 1.75;
    e = floor(log2) - 2, clamped to [-127, 127]. A zero (or fp32-subnormal) amax gives -127; an
    amax of at least 1.75 * 2^127 gives 127 (log2 of infinity, clamped).
    """
    bits = amax.to(torch.float32).view(torch.int32).to(torch.int64)
    biased = ((bits + (1 << 21)) & 0x7F800000) >> 23
    exponent = (biased - 129).clamp(-127, 127)
    exponent = torch.where(biased == 0, -127, exponent)
    exponent = torch.where(biased == 255, 127, exponent)
    return exponent.to(torch.int32)


def _in_row_blocks(
    weight: torch.Tensor, rows_fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    packed, scale = by_row_blocks(weight, rows_fn, [((n, k // 2), torch.uint8), ((n, k // BLOCK), torch.uint8)])
    return packed, scale


def quark_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AMD Quark 0.13 (OCP MX fp4, "even" mode): [N, K] (K % 32 == 0) -> (uint8 [N, K/2], uint8 [N, K/32])."""
    return _in_row_blocks(weight, _quark_rows)


def _quark_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    blocks = weight.reshape(n, k // BLOCK, BLOCK)
    exponent = shared_exponents(block_amax(blocks))
    # Division in float32 by the exact power of two (2^-127 is an fp32 subnormal and is kept).
    scaled = blocks.to(torch.float32) / power_of_two(exponent).unsqueeze(-1)
    codes = e2m1_codes(scaled.reshape(n, k), negative_zero=False)
    # Quark takes the log of max(scale, 2^-126) when storing: e = -127 is written as byte 1.
    stored = exponent.clamp(min=-126) + E8M0_BIAS
    return pack_codes(codes), stored.to(torch.uint8)


def compressed_tensors_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """compressed-tensors ``mxfp4-pack-quantized``: [N, K] -> (uint8 [N, K/2], uint8 [N, K/32])."""
    return _in_row_blocks(weight, _ct_rows)


# Rounding to a power of two on the dtype's own bits (compressed-tensors' round_to_power_2): adding
# these bits carries into the exponent exactly when the significand is >= 1.75; the mask clears the
# mantissa. (For bf16 this equals the float32 rule; for fp16 subnormals it does not.)
_ROUND_BITS = {
    torch.bfloat16: (torch.int16, 0x20, 0xFF80),
    torch.float16: (torch.int16, 0x100, 0xFC00),
    torch.float32: (torch.int32, 0x200000, 0xFF800000),
}


def _round_to_power_of_two(amax: torch.Tensor) -> torch.Tensor:
    int_dtype, half, mask = _ROUND_BITS[amax.dtype]
    bits = amax.view(int_dtype).to(torch.int64)  # amax >= 0: the sign bit is clear
    return ((bits + half) & mask).to(int_dtype).view(amax.dtype)


def _ct_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    dtype = weight.dtype
    blocks = weight.reshape(n, k // BLOCK, BLOCK)
    power = _round_to_power_of_two(block_amax(blocks))
    biased = (E8M0_BIAS + floor_log2(power) - 2).clamp(0, 255).round().to(torch.uint8)
    scale = power_of_two(biased.to(torch.int32) - E8M0_BIAS).to(dtype)
    scale = torch.where(scale == 0, torch.tensor(1.0, dtype=dtype), scale)  # fp16: 2^-127 underflows
    stored = (E8M0_BIAS + floor_log2(scale).to(torch.int32)).to(torch.uint8)
    scaled = (blocks / scale.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX).reshape(n, k)
    codes = e2m1_codes(scaled.to(torch.float32), negative_zero=True)
    return pack_codes(codes), stored


def dequantize(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What an engine computes from the stored bytes: float32 [N, K]."""
    n = packed.shape[0]
    values = decode_packed(packed).reshape(n, -1, BLOCK)
    factors = power_of_two(scale.to(torch.int32) - E8M0_BIAS).unsqueeze(-1)
    return (values * factors).reshape(n, -1)
