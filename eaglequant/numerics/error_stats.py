"""How far a quantized weight is from its source: sums over blocks of rows, and the figures made from them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ErrorSums:
    """Over a block of weights: the sum of squared reconstruction errors, of squared weights (for
    :func:`error_figures`), and the count of NaN/Inf weights."""

    noise: float
    signal: float
    nonfinite: int


def error_sums(weight: torch.Tensor, dequantize_rows: Callable[[slice], torch.Tensor]) -> ErrorSums:
    """The :class:`ErrorSums` of a reconstruction.

    Squares are summed in float32 per sub-block of rows and the sub-block sums in float64 (an error of
    ~1e-7 relative: enough for a figure in dB, and one pass instead of float64 copies of everything).
    """
    import torch

    from eaglequant.numerics.rows import row_blocks

    noise = signal = 0.0
    for rows in row_blocks(*weight.shape):
        w = weight[rows].to(torch.float32)
        noise += float(torch.linalg.vector_norm(dequantize_rows(rows) - w)) ** 2
        signal += float(torch.linalg.vector_norm(w)) ** 2
    nonfinite = 0
    if not math.isfinite(signal):
        nonfinite = int((~torch.isfinite(weight)).sum())
        if nonfinite == 0:  # finite weights whose squares overflow float32: sum them in float64
            return _error_sums_float64(weight, dequantize_rows)
    return ErrorSums(noise, signal, nonfinite)


def _error_sums_float64(weight: torch.Tensor, dequantize_rows: Callable[[slice], torch.Tensor]) -> ErrorSums:
    import torch

    w = weight.to(torch.float64)
    noise = float((dequantize_rows(slice(None)).to(torch.float64) - w).pow(2).sum())
    return ErrorSums(noise, float(w.pow(2).sum()), 0)


def error_figures(noise: float, signal: float) -> tuple[float, float]:
    """Relative Frobenius error and SQNR (dB) from the sums of :func:`error_sums`."""
    if signal == 0:
        return (0.0, math.inf) if noise == 0 else (math.inf, -math.inf)
    rel = math.sqrt(noise / signal)
    sqnr = math.inf if noise == 0 else 10 * math.log10(signal / noise)
    return rel, sqnr
