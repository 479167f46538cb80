"""FP8 E4M3 per-channel weight quantization, per vendor flavour.

``torch``'s float8_e4m3fn cast rounds to nearest even and does not saturate (|x| >= 480 becomes NaN),
so every flavour clamps to +-448 before casting.
"""

from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0


def quark_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AMD Quark ``ptpc_fp8`` (file-to-file path).

    scale = fp32(row amax) / 448, with 0 replaced by fp32 eps. The division uses the scale rounded to
    the weight's own dtype and happens in that dtype; the fp32 scale is what is saved.
    Returns (fp8 weight [N, K], fp32 scale [N]). Works on any block of whole rows.
    """
    amax = weight.abs().amax(dim=1).to(torch.float32)
    scale = amax / FP8_E4M3_MAX
    scale = torch.where(scale == 0, torch.finfo(torch.float32).eps, scale)
    scaled = weight / scale.to(weight.dtype).unsqueeze(1)
    quantized = scaled.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized, scale


def dequantize_per_channel(quantized: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return quantized.to(torch.float32) * scale.to(torch.float32).reshape(-1, 1)
