"""What every output format provides: tensor names and dtypes for a quantized linear, the vendor's
quantization math, and the ``quantization_config`` written into config.json."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch


@dataclass
class QuantizedLinear:
    tensors: dict[str, torch.Tensor]  # output name -> tensor, exactly the names of ``tensor_specs``
    relative_error: float  # ||dequant(q) - w|| / ||w|| in float64
    sqnr_db: float


class Format(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    # Which exclusion-matching rule an engine applies to this format's config (see engines/).
    exclude_key: ClassVar[str]

    @abstractmethod
    def supports(self, scheme: Scheme) -> bool: ...

    @abstractmethod
    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        """Names, dtypes and shapes of the tensors a quantized ``linear`` is stored as."""

    @abstractmethod
    def quantize(self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme) -> QuantizedLinear: ...

    @abstractmethod
    def quantization_config(self, scheme: Scheme, exclude: list[str]) -> dict[str, Any]:
        """The ``quantization_config`` object for config.json."""

    def extra_files(self, scheme: Scheme, exclude: list[str]) -> dict[str, dict[str, Any]]:
        """Further JSON files the format writes beside config.json (none by default)."""
        return {}


def error_stats(weight: torch.Tensor, dequantize_rows: Callable[[slice], torch.Tensor]) -> tuple[float, float]:
    """Relative Frobenius error and SQNR (dB) of a reconstruction, accumulated in float64 over row blocks."""
    import math

    import torch

    from eaglequant.schemes.rows import row_blocks

    noise = signal = 0.0
    for rows in row_blocks(*weight.shape):
        w = weight[rows].to(torch.float64)
        noise += (dequantize_rows(rows).to(torch.float64) - w).pow(2).sum().item()
        signal += w.pow(2).sum().item()
    if signal == 0:
        return (0.0, math.inf) if noise == 0 else (math.inf, -math.inf)
    rel = math.sqrt(noise / signal)
    sqnr = math.inf if noise == 0 else 10 * math.log10(signal / noise)
    return rel, sqnr
