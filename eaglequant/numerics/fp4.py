"""FP4 E2M1 elements: rounding to codes, packing two codes per byte, decoding.

Codes 0..7 are the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. Every vendor packs
the even element into the low nibble: ``byte[i] = code[2i] | code[2i+1] << 4``.
"""

from __future__ import annotations

import sys

import torch

from eaglequant.numerics.exact import abs_max

E2M1_MAX = 6.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_ROUND_TO_INTEGER = 12582912.0  # 1.5 * 2^23: x + this, in float32, is x rounded to an integer, half to even


def e2m1_codes(scaled: torch.Tensor, *, negative_zero: bool) -> torch.Tensor:
    """Round already-scaled float32 values to E2M1 codes (uint8, one per element), half to even,
    saturating at +-6. ``negative_zero``: whether a negative value that rounds to 0 keeps its sign
    bit (0x8) or is written as +0 (0x0) — vendors differ; -0.0 itself is always +0.

    One table lookup per element. Every rounding boundary of the grid (the midpoints 0.25, 0.75, ..., 5 and
    the saturation at 6) has at most two significant bits, so the code is a function of a float32's top 16
    bits and of whether its low 16 bits are all zero (an exact midpoint, where half-to-even picks the side).
    The table holds :func:`e2m1_codes_arithmetic` of both cases for every top half: ~3.5x faster.
    """
    bits = scaled.view(torch.int32)
    index = (bits >> 15) & 0x1FFFE  # the top 16 bits, times 2
    index += (bits & 0xFFFF) == 0
    return _code_table(negative_zero, scaled.device).index_select(0, index.reshape(-1)).reshape(scaled.shape)


def e2m1_codes_arithmetic(scaled: torch.Tensor, *, negative_zero: bool) -> torch.Tensor:
    """:func:`e2m1_codes` from the float's bits by integer arithmetic, the definition its table is built from.

    Round-half-even on the codes is exactly the vendors' rule (ties go to the even code), and it falls out of
    the float's own bits: on [1, 6] the grid is one mantissa bit per binade, so rounding the float32 to its
    leading mantissa bit (half to even) gives ``2 + 2 * exponent + bit``; on [0, 1) it is a multiple of 0.5,
    so the code is 2 * value rounded to an integer.
    """
    bits = scaled.view(torch.int32)
    magnitude_bits = bits & 0x7FFFFFFF
    magnitude = magnitude_bits.view(torch.float32).clamp(max=E2M1_MAX)
    mbits = magnitude.view(torch.int32)
    normal = ((mbits + (0x1FFFFF + ((mbits >> 22) & 1))) >> 22) - 252  # 252 = (127 << 1) - 2
    small = (magnitude * 2.0 + _ROUND_TO_INTEGER).view(torch.int32) - 0x4B400000  # bits of 1.5 * 2^23
    below_one = ((mbits >> 23) - 127) >> 31  # all ones where the magnitude is below 1, else 0
    codes = normal + ((small - normal) & below_one)
    negative = (bits >> 31) & ((-magnitude_bits) >> 31)  # all ones where negative and not -0.0
    if not negative_zero:
        negative &= (-codes) >> 31  # and not rounded to zero
    return (codes | (negative & 8)).to(torch.uint8)


_CODE_TABLES: dict[tuple[bool, torch.device], torch.Tensor] = {}


def _code_table(negative_zero: bool, device: torch.device) -> torch.Tensor:
    """uint8 [2^17]: entry ``2 * top + 1`` is the code of the float32 whose top 16 bits are ``top`` and low
    16 bits are zero; entry ``2 * top`` that of any other low half (all give the same code)."""
    key = (negative_zero, device)
    if key not in _CODE_TABLES:
        top = torch.arange(1 << 16, dtype=torch.int32) << 16  # wraps into the sign bit above 0x7FFF: intended
        pairs = torch.stack((top | 1, top), dim=1).reshape(-1)
        codes = e2m1_codes_arithmetic(pairs.view(torch.float32), negative_zero=negative_zero)
        _CODE_TABLES[key] = codes.to(device)
    return _CODE_TABLES[key]


def block_amax(blocks: torch.Tensor) -> torch.Tensor:
    """max |x| over the last dimension (see :func:`eaglequant.numerics.exact.abs_max`)."""
    return abs_max(blocks, -1)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, even element in the low nibble. K must be even."""
    if sys.byteorder != "little" or not codes.is_contiguous() or codes.storage_offset() % 2:
        return codes[..., 0::2] | (codes[..., 1::2] << 4)
    pairs = codes.view(torch.int16)  # little-endian: the even code is the low byte
    return ((pairs | (pairs >> 4)) & 0xFF).to(torch.uint8)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


_SIGNED_VALUES = E2M1_MAGNITUDES + tuple(-m for m in E2M1_MAGNITUDES)
# Each byte's two float32 values (low nibble first), the pair's 8 bytes read as one int64 so that decoding is a
# one-dimensional gather of one element per byte: ~5x faster than gathering rows of a [256, 2] table.
_BYTE_VALUE_PAIRS = (
    torch.tensor([(_SIGNED_VALUES[b & 15], _SIGNED_VALUES[b >> 4]) for b in range(256)], dtype=torch.float32)
    .view(torch.int64)
    .reshape(256)
)


def decode_packed(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] float32 values: one lookup per byte."""
    table = _BYTE_VALUE_PAIRS.to(packed.device)
    pairs = table.index_select(0, packed.reshape(-1).int())
    return pairs.view(torch.float32).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
