"""The torch reference beside each kernel: activations as the engine quantizes them, a dequantized weight,
a float32 matmul."""

from __future__ import annotations

import torch

from eaglequant.kinds.activations import MIN_TOKEN_SCALE
from eaglequant.kinds.base import StoredLinear
from eaglequant.numerics.fp8 import quantize_token_groups


def quantize_tokens_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8 E4M3: (codes [M, K] float8_e4m3fn, scale [M] float32), x ~= codes * scale."""
    codes, scale = quantize_token_groups(x, x.shape[1], MIN_TOKEN_SCALE)
    return codes, scale[:, 0]


def reference_activations(x: torch.Tensor, stored: StoredLinear) -> torch.Tensor:
    """``x`` [M, K] as the reference multiplies it: quantized and dequantized as the stored linear's activation kind
    says (per token, so the same for every block of the linear's output rows), in float32."""
    activation = stored.activation_kind
    simulated = None if activation is None else activation.simulate(x)
    return x.to(torch.float32) if simulated is None else simulated


def reference_linear(
    x: torch.Tensor,
    stored: StoredLinear,
    dequantized: torch.Tensor | None = None,
    activations: torch.Tensor | None = None,
) -> torch.Tensor:
    """y [M, N] float32 = activations (quantized as the stored linear's activation kind says) @ dequantized
    weight^T (``dequantized``: that weight, ``activations``: :func:`reference_activations` of ``x``, when the
    caller has them already: a linear computed a block of rows at a time quantizes its input once)."""
    activations = reference_activations(x, stored) if activations is None else activations
    weight = stored.dequantize() if dequantized is None else dequantized
    return activations @ weight.to(activations.device).T
