"""NVFP4: E2M1 elements in blocks of 16, an FP8 E4M3 scale per block and a float32 global scale per
tensor (shared by a fused group), per vendor.

ModelOpt stores the global scale as a divisor, ``weight_scale_2`` = amax / (6 * 448); compressed-tensors
as a multiplier, ``weight_global_scale`` = 6 * 448 / amax. The two round differently, so each flavour
follows its vendor step by step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eaglequant.numerics.exact import divide
from eaglequant.numerics.fp4 import E2M1_MAX, block_amax, decode_packed, e2m1_codes, pack_codes
from eaglequant.numerics.fp8 import FP8_E4M3_MAX
from eaglequant.numerics.rows import by_row_blocks

BLOCK = 16
GLOBAL_RANGE = E2M1_MAX * FP8_E4M3_MAX  # 2688
CT_ZERO_BLOCK_SCALE = 0.125  # compressed-tensors' eps for float8_e4m3fn


def _by_rows(
    weight: torch.Tensor, rows_fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    packed, scale = by_row_blocks(weight, rows_fn, [((n, k // 2), torch.uint8), ((n, k // BLOCK), torch.float8_e4m3fn)])
    return packed, scale


def compressed_tensors_global_scale(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight_global_scale`` (float32 [1]) from the group's amax, as compressed-tensors computes it:
    D(D(1 / max(amax, tiny)) * 2688) in the weight dtype D (torch turns ``2688 / t`` into a
    reciprocal then a multiply); a non-finite result becomes 1.0."""
    amax_d = amax.to(dtype).clamp(min=torch.finfo(dtype).tiny)
    scale = amax_d.reciprocal() * GLOBAL_RANGE
    if not bool(torch.isfinite(scale)):
        scale = torch.tensor(1.0, dtype=dtype, device=amax.device)
    return scale.to(torch.float32).reshape(1)


def compressed_tensors_quantize(weight: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (packed uint8 [N, K/2], block scale fp8 [N, K/16]), compressed-tensors flavour."""
    return _by_rows(weight, lambda rows: _ct_rows(rows, global_scale))


def _ct_rows(weight: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    dtype = weight.dtype
    blocks = weight.reshape(n, k // BLOCK, BLOCK)
    block_scale = divide(block_amax(blocks), torch.tensor(E2M1_MAX, dtype=dtype))  # in D
    fp8_scale = (global_scale * block_scale.to(torch.float32)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    fp8_scale = fp8_scale.to(torch.float8_e4m3fn).to(torch.float32)
    fp8_scale = torch.where(fp8_scale == 0, CT_ZERO_BLOCK_SCALE, fp8_scale)
    effective = fp8_scale / global_scale
    scaled = (blocks.to(torch.float32) / effective.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX)
    codes = e2m1_codes(scaled.reshape(n, k), negative_zero=True)
    return pack_codes(codes), fp8_scale.to(torch.float8_e4m3fn)


def dequantize(packed: torch.Tensor, block_scale: torch.Tensor, global_divisor: torch.Tensor) -> torch.Tensor:
    """float32 [N, K] = (code value * fp8 block scale) * ``global_divisor`` (ModelOpt's weight_scale_2, or
    1 / compressed-tensors' weight_global_scale). The first product is exact (2 x 4 significant bits), so
    the one rounding is the global scale's, as in a kernel that applies it to the accumulated output."""
    n = packed.shape[0]
    values = decode_packed(packed).reshape(n, -1, BLOCK)
    blocks = values * block_scale.to(torch.float32).unsqueeze(-1)
    return (blocks * global_divisor.to(torch.float32).reshape(())).reshape(n, -1)


_MODELOPT_MIN_BLOCK_SCALE = 2.0**-9  # the smallest E4M3 subnormal
_NAN_CODE = 7  # +6
_NAN_SCALE_BYTE = 0xFF  # E4M3 NaN with its sign bit set


def modelopt_global_scale(amax: torch.Tensor) -> torch.Tensor:
    """``weight_scale_2`` / ``input_scale``: fp32(amax) / 2688, a float32 0-dim tensor."""
    return divide(amax.to(torch.float32), GLOBAL_RANGE).reshape(())


def modelopt_quantize(weight: torch.Tensor, weight_scale_2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (packed uint8 [N, K/2], block scale fp8 [N, K/16]), ModelOpt's export
    (``NVFP4QTensor.get_weights_scaling_factor`` then ``NVFP4QTensor.quantize``)."""
    return _by_rows(weight, lambda rows: _modelopt_rows(rows, weight_scale_2))


def _modelopt_rows(weight: torch.Tensor, weight_scale_2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = weight.shape
    blocks = weight.reshape(n, k // BLOCK, BLOCK)
    amax = block_amax(blocks).to(torch.float32)
    per_block = amax / (E2M1_MAX * weight_scale_2)  # 6 * ws2 is rounded to fp32 first
    per_block = torch.where(per_block == 0, 1.0, per_block)
    fp8_scale = per_block.clamp(_MODELOPT_MIN_BLOCK_SCALE, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    divisor = fp8_scale.to(torch.float32) * weight_scale_2  # rounded to fp32 before dividing
    scaled = (blocks.to(torch.float32) / divisor.unsqueeze(-1)).reshape(n, k)
    codes = e2m1_codes(scaled, negative_zero=True)
    # An all-zero tensor (weight_scale_2 = 0) makes 0 / 0 NaNs, whose sign bit is the device's (x86: set, CUDA:
    # clear). ModelOpt writes code 7 for a NaN (its searchsorted puts NaN past every bound; NaN < 0 is false) and the
    # NaN scale its CPU makes, 0xFF: both written here whatever the device.
    codes = torch.where(torch.isnan(scaled), _NAN_CODE, codes)
    scale_bytes = torch.where(torch.isnan(per_block), _NAN_SCALE_BYTE, fp8_scale.view(torch.uint8))
    return pack_codes(codes), scale_bytes.view(torch.float8_e4m3fn)
