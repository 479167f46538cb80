"""INT4 weights in groups of 128 along the in-dimension, symmetric (llm-compressor ``W4A16``) or asymmetric with
a zero point per group (``W4A16_ASYM``), and compressed-tensors' ``pack-quantized`` int32 packing.

Every operation runs in the weight's own dtype D, rounding once to D, as compressed-tensors' observer and
quantizer do on the CPU. Per group of 128, lo = min(group, 0) and hi = max(group, 0):

- symmetric: scale = D(max(-lo, hi) / D(7.5)) (the range (7 - (-8)) / 2); q = round(clamp(D(w / scale), -8, 7)).
- asymmetric: scale = D(D(hi - lo) / D(15)); zero point zp = round(clamp(D(D(-8) - D(lo / scale)), -8, 7)),
  computed before a zero scale is replaced (an all-zero group: 0 / 0; compressed-tensors casts that NaN to int8,
  which gives 0 on the CPU, so it is 0 here by definition); q = round(clamp(D(D(w / scale) + D(zp)), -8, 7)).

A zero scale then becomes D's eps. Rounding is half to even, after the clamp.

Packing (``pack_to_int32`` with 4 bits): each code plus 8 is a nibble 0..15; int32 word j of a row holds elements
8j .. 8j + 7, element 8j + i in bits 4i .. 4i + 3 (the first element in the lowest nibble; the eighth sets the sign
bit). Zero points are packed the same way along the out-dimension: word [r, g] holds rows 8r .. 8r + 7 of group g.
"""

from __future__ import annotations

import torch

from eaglequant.numerics.exact import divide
from eaglequant.numerics.rows import by_row_blocks

GROUP = 128
INT4_MIN, INT4_MAX = -8, 7
OFFSET = 8  # packed nibble = code + 8
PER_WORD = 8  # nibbles per int32
SYMMETRIC_HALF_RANGE = 7.5
ASYMMETRIC_RANGE = 15.0
_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)


def compressed_tensors_quantize(
    weight: torch.Tensor, symmetric: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """[N, K] (K % 128 == 0) -> (packed int32 [N, K/8], scale [N, K/128] in the weight's dtype, zero points int8
    [N, K/128] or None when ``symmetric``), in row blocks. The zero points are returned unpacked
    (:func:`pack_rows` packs them as compressed-tensors stores them)."""
    n, k = weight.shape
    outputs = [((n, k // PER_WORD), torch.int32), ((n, k // GROUP), weight.dtype)]
    if symmetric:
        packed, scale = by_row_blocks(weight, lambda rows: _ct_rows(rows, True)[:2], outputs)
        return packed, scale, None
    packed, scale, zero = by_row_blocks(
        weight, lambda rows: _ct_rows(rows, False), [*outputs, ((n, k // GROUP), torch.int8)]
    )
    return packed, scale, zero


def _ct_rows(weight: torch.Tensor, symmetric: bool) -> tuple[torch.Tensor, ...]:
    dtype = weight.dtype
    n, k = weight.shape
    groups = weight.reshape(n, k // GROUP, GROUP)
    lo = groups.amin(dim=-1).clamp(max=0)
    hi = groups.amax(dim=-1).clamp(min=0)
    if symmetric:
        scale = divide(torch.maximum(-lo, hi), torch.tensor(SYMMETRIC_HALF_RANGE, dtype=dtype))
    else:
        scale = divide(hi - lo, torch.tensor(ASYMMETRIC_RANGE, dtype=dtype))
        offset = torch.tensor(float(INT4_MIN), dtype=dtype) - lo / scale
        zero = offset.clamp_(INT4_MIN, INT4_MAX).round_()
        zero = torch.where(scale == 0, torch.zeros_like(zero), zero).to(torch.int8)
    scale = torch.where(scale == 0, torch.tensor(torch.finfo(dtype).eps, dtype=dtype), scale)
    scaled = groups / scale[..., None]
    if not symmetric:
        scaled += zero.to(dtype)[..., None]
    codes = scaled.clamp_(INT4_MIN, INT4_MAX).round_().to(torch.int8).reshape(n, k)
    return (pack_rows(codes), scale) if symmetric else (pack_rows(codes), scale, zero)


def pack_rows(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7], [R, C] -> int32 [R, ceil(C / 8)], packed along each row (C is zero-padded to a
    multiple of 8, as compressed-tensors pads it)."""
    rows, columns = codes.shape
    nibbles = codes.to(torch.int32) + OFFSET
    if columns % PER_WORD:
        nibbles = torch.nn.functional.pad(nibbles, (0, PER_WORD - columns % PER_WORD))
    shifted = nibbles.view(rows, -1, PER_WORD) << _SHIFTS.to(codes.device)
    word = shifted[..., 0]
    for i in range(1, PER_WORD):
        word = word | shifted[..., i]
    return word


def unpack_rows(packed: torch.Tensor, columns: int) -> torch.Tensor:
    """int32 [R, W] -> int8 codes [R, ``columns``] in [-8, 7]: the inverse of :func:`pack_rows`."""
    nibbles = (packed.to(torch.int32)[..., None] >> _SHIFTS.to(packed.device)) & 0xF
    return (nibbles.reshape(packed.shape[0], -1)[:, :columns] - OFFSET).to(torch.int8)


def pack_zero_points(zero: torch.Tensor) -> torch.Tensor:
    """int8 [N, G] -> int32 [ceil(N / 8), G]: packed along the out-dimension, as compressed-tensors stores them."""
    return pack_rows(zero.T.contiguous()).T.contiguous()


def unpack_zero_points(packed: torch.Tensor, rows: int) -> torch.Tensor:
    """int32 [ceil(N / 8), G] -> int8 [N, G] (:func:`pack_zero_points` reversed)."""
    return unpack_rows(packed.T.contiguous(), rows).T.contiguous()


def dequantize(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None = None) -> torch.Tensor:
    """float32 [N, K] = (code - zero point) * the group's scale, what an engine computes from the stored bytes
    (the difference is an exact small integer; one rounding, the product's)."""
    n = packed.shape[0]
    groups = scale.shape[1]
    codes = unpack_rows(packed, groups * GROUP).to(torch.float32).view(n, groups, GROUP)
    if zero is not None:
        codes -= zero.to(torch.float32)[..., None]
    return (codes * scale.to(torch.float32)[..., None]).view(n, groups * GROUP)
