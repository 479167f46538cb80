"""FP8 E4M3 per-channel weight quantization, per vendor flavour.

``torch``'s float8_e4m3fn cast rounds to nearest even and does not saturate (|x| >= 480 becomes NaN),
so every flavour clamps to +-448 before casting.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eaglequant.numerics.exact import divide
from eaglequant.numerics.limits import E4M3_MAX as FP8_E4M3_MAX
from eaglequant.numerics.rows import by_row_blocks


def quark_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AMD Quark ``ptpc_fp8``, computed in row blocks (each row's scale needs only that row)."""
    return _fp8_by_rows(weight, quark_per_channel_block, (weight.shape[0],), torch.float32)


def _fp8_by_rows(
    weight: torch.Tensor,
    rows_fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
    scale_shape: tuple[int, ...],
    scale_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    quantized, scale = by_row_blocks(
        weight, rows_fn, [(tuple(weight.shape), torch.float8_e4m3fn), (scale_shape, scale_dtype)]
    )
    return quantized, scale


def quark_per_channel_block(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AMD Quark ``ptpc_fp8`` (file-to-file path).

    scale = fp32(row amax) / 448, with 0 replaced by fp32 eps. The division uses the scale rounded to
    the weight's own dtype and happens in that dtype; the fp32 scale is what is saved.
    Returns (fp8 weight [N, K], fp32 scale [N]). Works on any block of whole rows.

    One deliberate deviation: for an fp16 row whose scale is below fp16's smallest subnormal
    (row amax < ~1.3e-5), the scale rounds to 0 in fp16 and Quark 0.13 divides by zero, writing NaN
    for zeros and +-448 for everything else. Those rows (only those) are divided in float32.
    """
    amax = weight.abs().amax(dim=1).to(torch.float32)
    scale = divide(amax, FP8_E4M3_MAX)
    scale = torch.where(scale == 0, torch.finfo(torch.float32).eps, scale)
    divisor = scale.to(weight.dtype).unsqueeze(1)
    scaled = weight / divisor
    underflow = divisor == 0
    if bool(underflow.any()):
        exact = (weight.to(torch.float32) / scale.unsqueeze(1)).to(weight.dtype)
        scaled = torch.where(underflow, exact, scaled)
    quantized = scaled.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized, scale


def dequantize_per_channel(quantized: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return e4m3_to_float32(quantized) * scale.to(torch.float32).reshape(-1, 1)


_E4M3_VALUES = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)


def e4m3_to_float32(quantized: torch.Tensor) -> torch.Tensor:
    """``quantized.to(torch.float32)``, bit for bit. On the CPU torch converts FP8 one element at a time; a
    lookup in the table of all 256 values (made by that same conversion) is ~3x faster."""
    if quantized.device.type != "cpu":
        return quantized.to(torch.float32)
    codes = quantized.contiguous().view(torch.uint8)
    return _E4M3_VALUES.index_select(0, codes.reshape(-1).int()).reshape(codes.shape)


def compressed_tensors_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """compressed-tensors / llm-compressor ``FP8_DYNAMIC`` weights, in row blocks.

    Everything happens in the weight's own dtype D: scale = D(row amax / 448), 0 -> D's eps;
    q = fp8(clamp(D(w / scale), +-448)). The scale is saved as D [N, 1].
    """
    return _fp8_by_rows(weight, _compressed_tensors_rows, (weight.shape[0], 1), weight.dtype)


def _compressed_tensors_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = divide(weight.abs().amax(dim=1, keepdim=True), torch.tensor(FP8_E4M3_MAX, dtype=weight.dtype))
    scale = torch.where(scale == 0, torch.tensor(torch.finfo(weight.dtype).eps, dtype=weight.dtype), scale)
    return (weight / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn), scale


def modelopt_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NVIDIA ModelOpt ``FP8_PER_CHANNEL_PER_TOKEN`` export, in row blocks.

    Row amax in the weight dtype D; 0 becomes 448 (scale 1.0) and the amax is clamped to D's
    [tiny, max]; scale = fp32(amax) / 448 saved as F32 [N]; q = fp8(fp32(w) / scale) (no clamp needed:
    |w / scale| <= 448 by construction).
    """
    return _fp8_by_rows(weight, _modelopt_rows, (weight.shape[0],), torch.float32)


def _modelopt_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    info = torch.finfo(weight.dtype)
    amax = weight.abs().amax(dim=1)
    amax = torch.where(amax == 0, torch.tensor(FP8_E4M3_MAX, dtype=weight.dtype), amax)
    scale = divide(amax.clamp(info.tiny, info.max).to(torch.float32), FP8_E4M3_MAX)
    return (weight.to(torch.float32) / scale.unsqueeze(1)).to(torch.float8_e4m3fn), scale


def quantize_token_groups(x: torch.Tensor, group: int, min_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic FP8 E4M3 activations, one scale per token per ``group`` in-features (a partial last group
    has its own scale): (codes [M, K] float8_e4m3fn, scale [M, ceil(K / group)] float32), where
    x ~= codes * scale of each element's group and scale = max(amax / 448, ``min_scale``)."""
    x = x.to(torch.float32)
    m, k = x.shape
    groups = -(-k // group)
    padded = x if k % group == 0 else torch.nn.functional.pad(x, (0, groups * group - k))
    blocks = padded.view(m, groups, group)
    scale = divide(blocks.abs().amax(dim=2), FP8_E4M3_MAX).clamp_min(min_scale)  # on a GPU too: one IEEE division
    codes = (blocks / scale[:, :, None]).clamp_(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return codes.view(m, groups * group)[:, :k], scale


def dequantize_token_groups(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 [M, K] from :func:`quantize_token_groups`' output, with no tensor larger than the result."""
    m, k = codes.shape
    groups = scale.shape[1]
    group = -(-k // groups)
    values = codes.to(torch.float32)
    if k % group:
        values = torch.nn.functional.pad(values, (0, groups * group - k))
    return values.view(m, groups, group).mul_(scale[:, :, None]).view(m, groups * group)[:, :k]
