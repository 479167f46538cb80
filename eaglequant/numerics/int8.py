"""INT8 symmetric per-channel weights (W8A8), as llm-compressor's ``W8A8`` preset computes them, and dynamic
per-token INT8 activations, as the engines' kernels quantize them.

Weights, every operation in the weight's own dtype D (bf16, fp16 or fp32; each rounds once to D):
scale = D(row amax / D(127.5)) — compressed-tensors' symmetric range is (127 - (-128)) / 2, not 127 — with 0
replaced by D's eps; q = round_half_even(clamp(D(w / scale), -128, 127)). The clamp comes first (a row's amax
maps to 127.5, which clamps to 127), and ``w / scale`` is rounded to D before it is rounded to an integer
(bf16 keeps halves only below 128: a value 101.3 becomes 101.5, then 102).
"""

from __future__ import annotations

import torch

from eaglequant.numerics.exact import divide
from eaglequant.numerics.rows import by_row_blocks

INT8_MIN, INT8_MAX = -128, 127
SYMMETRIC_HALF_RANGE = 127.5  # compressed-tensors: (q_max - q_min) / 2
TOKEN_RANGE = 127.0  # the engines' dynamic per-token activation scale: amax / 127
MIN_TOKEN_AMAX = 1e-10  # an all-zero token gets a tiny scale, not 0 (its codes are 0 either way)


def compressed_tensors_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (int8 [N, K], scale [N, 1] in the weight's dtype), llm-compressor's ``W8A8`` weights,
    computed in row blocks (a row's scale needs only that row)."""
    n, k = weight.shape
    quantized, scale = by_row_blocks(weight, _ct_rows, [((n, k), torch.int8), ((n, 1), weight.dtype)])
    return quantized, scale


def _ct_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = weight.dtype
    amax = weight.abs().amax(dim=1, keepdim=True)  # max(|min(row, 0)|, max(row, 0))
    scale = divide(amax, torch.tensor(SYMMETRIC_HALF_RANGE, dtype=dtype))
    scale = torch.where(scale == 0, torch.tensor(torch.finfo(dtype).eps, dtype=dtype), scale)
    quantized = (weight / scale).clamp_(INT8_MIN, INT8_MAX).round_()
    return quantized.to(torch.int8), scale


def quark_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (int8 [N, K], float32 scale [N]), AMD Quark 0.13's file-to-file INT8 per channel (an
    ``Int8PerChannelSpec`` on weights), in row blocks.

    scale = fp32(D(row amax / D(127.5))), floored at float32's eps (not only 0: anything below it); the codes are
    round_half_even(clamp(fp32(w) * fp32(1 / scale), -128, 127)) -- a product with the reciprocal, not a division,
    so an exact half of a step can land on either side (6.5 becomes 6.5000005, then 7)."""
    n, k = weight.shape
    quantized, scale = by_row_blocks(weight, _quark_rows, [((n, k), torch.int8), ((n,), torch.float32)])
    return quantized, scale


def _quark_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # a GPU multiplies by a CPU scalar's reciprocal instead of dividing (rounds twice): divide on the weight's device
    amax = weight.abs().amax(dim=1)
    scale = divide(amax, torch.tensor(SYMMETRIC_HALF_RANGE, dtype=weight.dtype)).to(torch.float32)
    scale = scale.clamp_min(torch.finfo(torch.float32).eps)
    quantized = (weight.to(torch.float32) * scale.reciprocal()[:, None]).clamp_(INT8_MIN, INT8_MAX).round_()
    return quantized.to(torch.int8), scale


def dequantize_per_channel(quantized: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 [N, K] = code * the row's scale (exact: an 8-bit code times a float32 scale rounds once)."""
    return quantized.to(torch.float32) * scale.to(torch.float32).reshape(-1, 1)


def quantize_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic symmetric INT8 per token, as vLLM's ``scaled_int8_quant`` (no scale given) and SGLang's
    ``per_token_quant_int8`` compute it: scale = amax / 127 in float32 and codes = round(x * (127 / amax)), half to
    even, clamped to [-128, 127]. Returns (int8 codes [M, K], float32 scale [M])."""
    x = x.to(torch.float32)
    amax = x.abs().amax(dim=1).clamp_min(MIN_TOKEN_AMAX)
    # one IEEE division: ``127 / tensor`` would be torch's reciprocal-then-multiply, which rounds twice
    inverse = torch.full_like(amax, TOKEN_RANGE) / amax
    codes = (x * inverse[:, None]).round_().clamp_(INT8_MIN, INT8_MAX)
    return codes.to(torch.int8), divide(amax, TOKEN_RANGE)


def simulate_tokens(x: torch.Tensor) -> torch.Tensor:
    """float32 [M, K]: ``x`` quantized per token as the engines do, then dequantized (codes * scale)."""
    codes, scale = quantize_tokens(x)
    return codes.to(torch.float32) * scale[:, None]
