"""FP4 E2M1 elements: rounding to codes, packing two codes per byte, decoding.

Codes 0..7 are the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. Every vendor packs
the even element into the low nibble: ``byte[i] = code[2i] | code[2i+1] << 4``.
"""

from __future__ import annotations

import torch

E2M1_MAX = 6.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes. On a tie round-half-even picks the even code: the
# comparison is strict (stay down) when the lower code is even, inclusive (go up) when it is odd.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def e2m1_codes(scaled: torch.Tensor, *, negative_zero: bool) -> torch.Tensor:
    """Round already-scaled float32 values to E2M1 codes (uint8, one per element), half to even,
    saturating at +-6. ``negative_zero``: whether a negative value that rounds to 0 keeps its sign
    bit (0x8) or is written as +0 (0x0) — vendors differ."""
    magnitude = scaled.abs()
    codes = torch.zeros(scaled.shape, dtype=torch.uint8, device=scaled.device)
    for index, midpoint in enumerate(_MIDPOINTS):
        above = magnitude > midpoint if index % 2 == 0 else magnitude >= midpoint
        codes += above.to(torch.uint8)
    negative = scaled < 0
    if not negative_zero:
        negative &= codes != 0
    return codes | (negative.to(torch.uint8) << 3)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, even element in the low nibble. K must be even."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def decode_codes(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes -> float32 values."""
    table = torch.tensor(E2M1_MAGNITUDES + tuple(-m for m in E2M1_MAGNITUDES), dtype=torch.float32, device=codes.device)
    return table[codes.long()]
