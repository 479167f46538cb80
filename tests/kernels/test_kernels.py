"""The fused dequant-GEMM kernels against the torch reference: Triton under TRITON_INTERPRET=1 on CPU
(small shapes), compiled on a GPU when there is one."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are decorated, at import
pytest.importorskip("triton")

from eaglequant.kernels import BACKEND_CALLS, StoredLinear, fused_linear
from eaglequant.kernels.reference import quantize_tokens_fp8, reference_activations, reference_linear
from eaglequant.kernels.triton_gemm import triton_linear
from eaglequant.numerics import fp8, mxfp4, nvfp4

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Both sides accumulate exact products in float32; only the summation order differs.
TOLERANCE = 2e-5  # max |kernel - reference| / max |reference|


def _layouts(weight: torch.Tensor) -> dict[str, StoredLinear]:
    q, scale = fp8.quark_per_channel(weight)
    ct_q, ct_scale = fp8.compressed_tensors_per_channel(weight)
    global_scale = nvfp4.modelopt_global_scale(weight.float().abs().max())
    packed, block = nvfp4.modelopt_quantize(weight, global_scale)
    ct_global = nvfp4.compressed_tensors_global_scale(weight.float().abs().max(), weight.dtype)
    ct_packed, ct_block = nvfp4.compressed_tensors_quantize(weight, ct_global)
    mx_packed, mx_scale = mxfp4.quark_quantize(weight)
    return {
        "fp8-w8a16": StoredLinear("fp8-channel", q, channel_scale=scale),
        "fp8-w8a8": StoredLinear("fp8-channel", q, channel_scale=scale, activation="fp8-token"),
        "fp8-w8a8-ct": StoredLinear(
            "fp8-channel", ct_q, channel_scale=ct_scale.float().reshape(-1), activation="fp8-token"
        ),
        "nvfp4-modelopt": StoredLinear("nvfp4", packed, block_scale=block, global_scale=global_scale),
        "nvfp4-ct": StoredLinear("nvfp4", ct_packed, block_scale=ct_block, global_scale=1 / ct_global.reshape(())),
        "mxfp4": StoredLinear("mxfp4", mx_packed, block_scale=mx_scale),
    }


SHAPES = [(3, 80, 96), (16, 64, 128), (5, 33, 64)]  # (M, N, K): partial row, column and K tiles


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["fp8-w8a16", "fp8-w8a8", "fp8-w8a8-ct", "nvfp4-modelopt", "nvfp4-ct", "mxfp4"])
def test_kernel_matches_reference(layout: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    generator = torch.Generator().manual_seed(m * n + k)
    weight = (torch.randn(n, k, generator=generator) * 0.05).to(torch.bfloat16)
    weight[0] = 0  # an all-zero row: zero scales must not turn into NaN
    x = torch.randn(m, k, generator=generator).to(torch.bfloat16)
    x[-1] *= 40  # an outlier token
    stored = _layouts(weight)[layout]
    expected = reference_linear(x, stored)
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE)).cpu()
    assert torch.isfinite(got).all()
    assert (got - expected).abs().max() <= TOLERANCE * expected.abs().max()


@pytest.mark.parametrize("layout", ["fp8-w8a16", "nvfp4-modelopt", "nvfp4-ct", "mxfp4"])
def test_kernel_dequantizes_bit_exactly(layout: str) -> None:
    """Identity activations read the kernel's in-register dequantization out: it equals the reference's."""
    weight = (torch.randn(48, 64, generator=torch.Generator().manual_seed(1)) * 0.1).to(torch.bfloat16)
    stored = _layouts(weight)[layout]
    eye = torch.eye(64, dtype=torch.bfloat16)
    got = triton_linear(eye.to(DEVICE), stored.to(DEVICE)).cpu().T
    assert torch.equal(got, stored.dequantize())


@settings(max_examples=12, deadline=None)
@given(
    data=st.binary(min_size=16 * 16, max_size=16 * 16),
    scales=st.lists(st.integers(min_value=0, max_value=0x7E), min_size=16 * 2, max_size=16 * 2),
    exponents=st.lists(st.integers(min_value=100, max_value=150), min_size=16, max_size=16),
)
def test_any_stored_bytes_decode_like_the_reference(data: bytes, scales: list[int], exponents: list[int]) -> None:
    """Every E2M1 code (both nibbles, both signs), every finite E4M3 block scale, E8M0 exponents."""
    packed = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(16, 16)
    eye = torch.eye(32, dtype=torch.bfloat16)
    block = torch.tensor(scales, dtype=torch.uint8).reshape(16, 2).view(torch.float8_e4m3fn)
    nv = StoredLinear("nvfp4", packed, block_scale=block, global_scale=torch.tensor(0.37, dtype=torch.float32))
    assert torch.equal(triton_linear(eye, nv).T, nv.dequantize())
    mx = StoredLinear("mxfp4", packed, block_scale=torch.tensor(exponents, dtype=torch.uint8).reshape(16, 1))
    assert torch.equal(triton_linear(eye, mx).T, mx.dequantize())


def test_in_kernel_token_quantization_rounds_like_torch() -> None:
    """Ties and the largest values: the kernel's E4M3 rounding is the hardware's (nearest, ties to even)."""
    k = 64
    x = torch.zeros(4, k)
    x[0, :] = torch.linspace(-448, 448, k)  # scale 1: values fall on and between E4M3 points
    x[0, 0] = 448.0
    x[1, :] = torch.tensor([200.0, 208.0, 216.0, 232.0] * 16)  # exact ties at 2^7 spacing 16
    x[2, :] = 1e-6  # below the minimum token scale
    codes, scale = quantize_tokens_fp8(x)
    eye = torch.eye(k).to(torch.float8_e4m3fn)
    stored = StoredLinear("fp8-channel", eye, channel_scale=torch.ones(k), activation="fp8-token")
    got = triton_linear(x.to(torch.bfloat16).to(torch.float32), stored)
    assert torch.equal(got, codes.to(torch.float32) * scale[:, None])


def test_dispatch_uses_the_reference_on_cpu_and_records_it() -> None:
    stored = _layouts(torch.randn(32, 64).to(torch.bfloat16))["mxfp4"]
    before = BACKEND_CALLS["reference"]
    fused_linear(torch.randn(2, 64).to(torch.bfloat16), stored)
    assert BACKEND_CALLS["reference"] == before + 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dispatch_runs_triton_on_gpu() -> None:
    stored = _layouts(torch.randn(256, 512).to(torch.bfloat16))["nvfp4-modelopt"]
    x = torch.randn(8, 512).to(torch.bfloat16)
    before = BACKEND_CALLS["triton"]
    got = fused_linear(x.cuda(), stored.to("cuda")).cpu()
    assert BACKEND_CALLS["triton"] == before + 1
    expected = reference_linear(x, stored)
    assert (got - expected).abs().max() <= TOLERANCE * expected.abs().max()


def test_bench_kernels_cli(tmp_path) -> None:
    import json

    from tests.conftest import run_cli

    if not torch.cuda.is_available():
        refused = run_cli("bench", "kernels")
        assert refused.exit_code == 2 and "needs a CUDA GPU" in refused.stderr and "Traceback" not in refused.stderr
    result = run_cli("bench", "kernels", "--device", "cpu", "--tiny", "--m", "2", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    kernels = {row["kernel"] for row in data["rows"]}
    assert {"torch-bf16", "fp8-w8a16", "fp8-w8a8", "nvfp4-w4a16", "mxfp4-w4a16"} <= kernels
    assert all(row["ms"] > 0 and row["speedup_vs_bf16"] > 0 for row in data["rows"])


@pytest.mark.parametrize("layout", ["fp8-w8a16", "fp8-w8a8", "nvfp4-modelopt"])
def test_a_linear_by_row_blocks_quantizes_its_input_once_to_the_same_product(layout: str) -> None:
    """Activation quantization is per token: done once for a linear and reused by each block of output rows, every
    block's product is the one it gives quantizing its input itself, bit for bit."""
    generator = torch.Generator().manual_seed(3)
    weight = (torch.randn(96, 64, generator=generator) * 0.05).to(torch.bfloat16)
    x = torch.randn(5, 64, generator=generator).to(torch.bfloat16)
    x[-1] *= 40  # an outlier token, so that each token's scale differs
    stored = _layouts(weight)[layout]
    prepared = reference_activations(x, stored)
    for start in range(0, 96, 32):
        block = stored.rows(slice(start, start + 32))
        reused = fused_linear(x, block, "reference", activations=prepared)
        assert torch.equal(reused, fused_linear(x, block, "reference"))
