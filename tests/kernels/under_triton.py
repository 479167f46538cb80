"""What the Triton kernel tests share: the kernels compiled on a GPU or interpreted on CPU (``TRITON_INTERPRET=1``,
which Triton reads when the kernels are decorated, so importing this module sets it before they are imported),
Triton required where CI installs it, and the GEMM case every layout is checked on."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from eaglequant.kernels import StoredLinear
from tests.conftest import vendor_required

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


def triton_kernel(*, module: bool = False) -> Callable[[torch.Tensor, StoredLinear], torch.Tensor]:
    """The Triton dequant-GEMM. Without Triton: a skip, except in CI, which installs it with the test extra and
    where its absence fails. ``module``: called at a test module's top, skipping the whole module."""
    try:
        import triton  # noqa: F401
    except ImportError:
        if vendor_required():
            raise
        pytest.skip("triton is not installed (pip install -e '.[test]')", allow_module_level=module)
    from eaglequant.kernels.triton_gemm import triton_linear

    return triton_linear


def gemm_case(shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight [N, K], x [M, K]) in bf16 for ``shape`` = (M, N, K), seeded by it: the first weight row all zero (zero
    scales must not turn into NaN) and the last token an outlier (so each token's scale differs)."""
    m, n, k = shape
    generator = torch.Generator().manual_seed(m * n + k)
    weight = (torch.randn(n, k, generator=generator) * 0.05).to(torch.bfloat16)
    weight[0] = 0
    x = torch.randn(m, k, generator=generator).to(torch.bfloat16)
    x[-1] *= 40
    return weight, x
