"""The torch reference beside each kernel: dequantize, then a float32 matmul."""

from __future__ import annotations

import torch

from eaglequant.kernels.stored import StoredLinear

FP8_MAX = 448.0
# vLLM's dynamic per-token FP8 quantization floors the scale (scaled_fp8_quant: 1 / (448 * 512)).
MIN_TOKEN_SCALE = 1.0 / (FP8_MAX * 512.0)


def quantize_tokens_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8 E4M3: (codes [M, K] float8_e4m3fn, scale [M] float32), x ~= codes * scale."""
    x = x.to(torch.float32)
    scale = (x.abs().amax(dim=1) / FP8_MAX).clamp_min(MIN_TOKEN_SCALE)
    codes = (x / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, scale


def reference_linear(x: torch.Tensor, stored: StoredLinear) -> torch.Tensor:
    """y [M, N] float32 = activations (quantized per token for W8A8) @ dequantized weight^T."""
    if stored.activation == "fp8-token":
        codes, scale = quantize_tokens_fp8(x)
        activations = codes.to(torch.float32) * scale[:, None]
    else:
        activations = x.to(torch.float32)
    return activations @ stored.dequantize().to(activations.device).T
