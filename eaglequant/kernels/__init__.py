"""Fused dequant-GEMM kernels for the stored layouts, and the torch reference beside each.

``fused_linear`` runs the Triton kernel when the input is on a CUDA device and Triton is installed,
and the torch reference otherwise.
"""

from __future__ import annotations

import torch

from eaglequant.kernels.reference import reference_activations, reference_linear
from eaglequant.kinds.base import StoredLinear


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def choose_backend(x: torch.Tensor) -> str:
    """Triton for CUDA inputs when it is installed; the torch reference otherwise."""
    return "triton" if x.is_cuda and triton_available() else "reference"


def fused_linear(
    x: torch.Tensor,
    stored: StoredLinear,
    backend: str = "auto",
    dequantized: torch.Tensor | None = None,
    activations: torch.Tensor | None = None,
) -> torch.Tensor:
    """y [M, N] float32 = x [M, K] @ dequant(stored)^T. ``backend``: auto | triton | reference. ``dequantized``
    (``stored``'s dequantized weight) and ``activations`` (:func:`reference_activations` of ``x``): what the
    caller has already, so the reference does not make it again (a kernel reads the stored tensors and ``x``
    whatever it is given)."""
    if backend == "auto":
        backend = choose_backend(x)
    if backend == "triton":
        from eaglequant.kernels.triton_gemm import triton_linear

        return triton_linear(x, stored)
    return reference_linear(x, stored, dequantized, activations)


__all__ = [
    "StoredLinear",
    "choose_backend",
    "fused_linear",
    "reference_activations",
    "reference_linear",
    "triton_available",
]
