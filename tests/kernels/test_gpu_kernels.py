"""Every registered kernel compiled for the GPU, at the token counts a draft runs (M = 1 to 256), against a float64
reference and the torch reference. Skips where torch sees no CUDA device (``scripts/gpu_check.sh`` runs it on one);
the check that the list covers every registered kind runs everywhere.

The float64 reference dequantizes the stored codes and multiplies by the scales in float64, and multiplies the
activations as the engine quantizes them (float32 values, rounded once each) in float64. The kernel may differ from
it by summation alone (its operands are exact in bf16 and it accumulates in float32), so each token's error is
bounded by a multiple of the float32 reference's own error on that token against float64 (:data:`ERROR_MULTIPLE`),
with a floor for a token where that error happens to be near zero (:data:`FLOOR`, relative to the largest sum of
|x| |w| the token takes).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch

from eaglequant.bench.kernels import KERNELS, random_stored, registered_kernel_pairs
from eaglequant.kernels import StoredLinear
from eaglequant.kernels.reference import reference_activations, reference_linear
from eaglequant.kinds.base import KernelLayout

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

M_VALUES = (1, 4, 16, 64, 256)
N, K = 384, 1024  # three 128-row blocks, eight 128-column groups: every kind's scale layout tiles it whole
# Tensor cores may truncate as they accumulate (several ulp a K step, one way), where the CPU's float32 rounds to
# nearest; a single activation rounded to a neighbouring code errs about 2,000 times the float32 reference's error.
ERROR_MULTIPLE = 64.0
FLOOR = 2.0**-26  # about a float32 rounding (2^-24) of the largest row sum, not 2^-24 x K
TORCH_TOLERANCE = 2e-5  # max |kernel - torch reference| / max |torch reference|, as tests/kernels/test_kernels.py
# Where the measured errors go, one JSON line a case (scripts/gpu_check.sh's summary reads them); unset: nowhere.
ERRORS_FILE = os.environ.get("EAGLEQUANT_KERNEL_ERRORS")


def test_the_bench_times_every_registered_kernel() -> None:
    assert set(KERNELS.values()) == registered_kernel_pairs()


def dequantize_float64(stored: StoredLinear) -> torch.Tensor:
    """float64 [N, K]: the stored codes (dequantized with unit scales: exact) times the scales in float64."""
    layout = stored.weight_kind.kernel_layout
    if layout is KernelLayout.NVFP4:  # an E2M1 code times its E4M3 block scale is exact in float32; the global is not
        assert stored.global_scale is not None
        unit = replace(stored, global_scale=torch.ones((), dtype=torch.float32))
        return unit.dequantize().double() * float(stored.global_scale)
    if stored.channel_scale is not None:  # FP8 and INT8 rows
        codes = replace(stored, channel_scale=torch.ones_like(stored.channel_scale)).dequantize().double()
        return codes * stored.channel_scale.double()[:, None]
    if layout in (KernelLayout.FP8_BLOCKS, KernelLayout.INT4_GROUPS):
        assert stored.block_scale is not None
        codes = replace(stored, block_scale=torch.ones_like(stored.block_scale)).dequantize().double()
        n, k = codes.shape
        rows, columns = -(-n // stored.block_scale.shape[0]), -(-k // stored.block_scale.shape[1])
        scale = stored.block_scale.double().repeat_interleave(rows, 0)[:n].repeat_interleave(columns, 1)[:, :k]
        return codes * scale
    return stored.dequantize().double()  # MXFP4: power-of-two scales, exact


def _case(kernel: str, m: int) -> tuple[torch.Tensor, StoredLinear]:
    generator = torch.Generator().manual_seed(m)
    stored = random_stored(kernel, N, K, "cpu", generator)
    x = torch.randn(m, K, generator=generator).to(torch.bfloat16)
    x[-1] *= 40  # an outlier token: each token's activation scale differs
    return x, stored


@needs_cuda
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_compiled_kernel_against_float64_and_torch(kernel: str, m: int) -> None:
    from eaglequant.kernels.triton_gemm import triton_linear

    x, stored = _case(kernel, m)
    weight64 = dequantize_float64(stored)
    activations = reference_activations(x, stored).double()
    exact = activations @ weight64.T
    torch_reference = reference_linear(x, stored)
    got = triton_linear(x.cuda(), stored.to("cuda")).cpu()
    assert torch.isfinite(got).all()
    kernel_error = (got.double() - exact).abs().amax(dim=1)  # per token: the outlier token's error hides no other's
    float32_error = (torch_reference.double() - exact).abs().amax(dim=1)
    row_sums = (activations.abs() @ weight64.abs().T).amax(dim=1)
    allowed = torch.maximum(ERROR_MULTIPLE * float32_error, FLOOR * row_sums)
    torch_error = (got - torch_reference).abs().max().item() / torch_reference.abs().max().item()
    if ERRORS_FILE:
        ratio = (kernel_error / float32_error.clamp_min(1e-300)).max().item()
        row = {"kernel": kernel, "m": m, "n": N, "k": K, "worst_ratio": ratio, "vs_torch_relative": torch_error}
        with open(ERRORS_FILE, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
    assert (kernel_error <= allowed).all(), (kernel_error / float32_error).max().item()
    assert torch_error <= TORCH_TOLERANCE
