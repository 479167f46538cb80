"""The fused dequant-GEMM kernels against the torch reference: Triton under TRITON_INTERPRET=1 on CPU
(small shapes), compiled on a GPU when there is one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.kernels import StoredLinear, fused_linear
from eaglequant.kernels.reference import quantize_tokens_fp8, reference_linear
from eaglequant.kinds import FP8_CHANNEL, FP8_TOKEN, MXFP4, NVFP4
from tests.kernels.stored_layouts import stored_layouts
from tests.kernels.under_triton import DEVICE, gemm_case, triton_kernel

triton_linear = triton_kernel(module=True)
# Both sides accumulate exact products in float32; only the summation order differs.
TOLERANCE = 2e-5  # max |kernel - reference| / max |reference|


SHAPES = [(3, 80, 96), (16, 64, 128), (5, 33, 64)]  # (M, N, K): partial row, column and K tiles


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["fp8-w8a16", "fp8-w8a8", "fp8-w8a8-ct", "nvfp4-modelopt", "nvfp4-ct", "mxfp4"])
def test_kernel_matches_reference(layout: str, shape: tuple[int, int, int]) -> None:
    weight, x = gemm_case(shape)
    stored = stored_layouts(weight)[layout]
    expected = reference_linear(x, stored)
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE)).cpu()
    assert torch.isfinite(got).all()
    assert (got - expected).abs().max() <= TOLERANCE * expected.abs().max()


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("layout", ["fp8-w8a16", "nvfp4-modelopt", "nvfp4-ct", "mxfp4"])
def test_kernel_dequantizes_bit_exactly(layout: str, split_k: int) -> None:
    """Identity activations read the kernel's in-register dequantization out: it equals the reference's (K in one
    program, or split over two whose partial sums are added: each output has one nonzero product)."""
    from eaglequant.kernels.triton_gemm import LaunchConfig

    weight = (torch.randn(48, 64, generator=torch.Generator().manual_seed(1)) * 0.1).to(torch.bfloat16)
    stored = stored_layouts(weight)[layout]
    eye = torch.eye(64, dtype=torch.bfloat16)
    launch = LaunchConfig(block_k=32, split_k=split_k)
    got = triton_linear(eye.to(DEVICE), stored.to(DEVICE), launch).cpu().T
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
    nv = StoredLinear(NVFP4, packed, block_scale=block, global_scale=torch.tensor(0.37, dtype=torch.float32))
    assert torch.equal(triton_linear(eye.to(DEVICE), nv.to(DEVICE)).cpu().T, nv.dequantize())
    mx = StoredLinear(MXFP4, packed, block_scale=torch.tensor(exponents, dtype=torch.uint8).reshape(16, 1))
    assert torch.equal(triton_linear(eye.to(DEVICE), mx.to(DEVICE)).cpu().T, mx.dequantize())


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
    stored = StoredLinear(FP8_CHANNEL, eye, channel_scale=torch.ones(k), activation_kind=FP8_TOKEN)
    got = triton_linear(x.to(torch.bfloat16).to(torch.float32).to(DEVICE), stored.to(DEVICE)).cpu()
    assert torch.equal(got, codes.to(torch.float32) * scale[:, None])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dispatch_runs_triton_on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from eaglequant.kernels import triton_gemm

    stored = stored_layouts(torch.randn(256, 512).to(torch.bfloat16))["nvfp4-modelopt"]
    x = torch.randn(8, 512).to(torch.bfloat16)
    calls = []
    kernel = triton_gemm.triton_linear
    monkeypatch.setattr(triton_gemm, "triton_linear", lambda *args: calls.append(args) or kernel(*args))
    got = fused_linear(x.cuda(), stored.to("cuda")).cpu()
    assert len(calls) == 1
    expected = reference_linear(x, stored)
    assert (got - expected).abs().max() <= TOLERANCE * expected.abs().max()


# Tiles wider than K's 64, an uneven split of K (3 asked, 2 made: each a whole number of tiles) and split partial sums.
CONFIGS = [(32, 128, 1), (128, 256, 1), (64, 128, 3), (16, 64, 4)]  # (block_n, block_k, split_k)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "n{}-k{}-split{}".format(*c))
@pytest.mark.parametrize("layout", ["fp8-w8a16", "fp8-w8a8", "nvfp4-modelopt", "mxfp4"])
def test_every_launch_config_matches_reference(layout: str, config: tuple[int, int, int]) -> None:
    from eaglequant.kernels.triton_gemm import LaunchConfig

    weight, x = gemm_case((5, 80, 512))
    stored = stored_layouts(weight)[layout]
    expected = reference_linear(x, stored)
    launch = LaunchConfig(block_n=config[0], block_k=config[1], split_k=config[2])
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE), launch).cpu()
    assert (got - expected).abs().max() <= TOLERANCE * expected.abs().max()


def test_decode_launch_by_what_a_tile_reads() -> None:
    """At M <= 16 the sweep's choice for the weight's bits and whether the kernel quantizes activations; above, the
    first launch; and no tile of fewer rows than tl.dot takes."""
    from eaglequant.kernels.triton_gemm import LaunchConfig, default_config
    from eaglequant.kinds.base import KernelLayout

    assert default_config(1, KernelLayout.NVFP4, False) == LaunchConfig(block_n=64, block_k=128, split_k=8)
    assert default_config(16, KernelLayout.MXFP4, False) == default_config(4, KernelLayout.NVFP4, False)
    assert default_config(1, KernelLayout.INT4_GROUPS, False) == LaunchConfig(block_n=64, block_k=64, split_k=8)
    assert default_config(4, KernelLayout.FP8_ROWS, False) == LaunchConfig(block_n=64, block_k=128, split_k=4)
    w8a8 = LaunchConfig(block_n=128, block_k=128, split_k=4, num_warps=8)
    assert default_config(16, KernelLayout.INT8_ROWS, True) == w8a8
    assert default_config(17, KernelLayout.FP8_ROWS, True) == LaunchConfig(block_n=64, block_k=64, split_k=1)
    with pytest.raises(ValueError, match="at least 16 rows"):
        LaunchConfig(block_m=8)
