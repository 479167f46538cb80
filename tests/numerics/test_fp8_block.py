"""Block FP8 (128 x 128 weight blocks, FP8 per-token-group activations): its two flavours of math against float64
and against each other's invariants, its stored form read by the reference and by the Triton kernel."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.kernels import StoredLinear
from eaglequant.kernels.reference import reference_linear
from eaglequant.kinds import ACTIVATION_KINDS, FP8_BLOCK, activation_kind
from eaglequant.numerics import fp8_block
from eaglequant.numerics.fp8 import dequantize_token_groups, quantize_token_groups
from eaglequant.numerics.rows import row_blocks
from tests.kernels.under_triton import DEVICE, triton_kernel

E4M3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
E4M3_GRID = torch.unique(E4M3[torch.isfinite(E4M3)])


def _weight(n: int, k: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(n, k, generator=generator) * torch.rand(n, 1, generator=generator) * 0.1
    return weight.to(dtype)


def _nearest_e4m3(x: torch.Tensor) -> torch.Tensor:
    """float64 round to nearest E4M3 value, ties to even code (the grid is sorted, even codes at even steps)."""
    index = torch.searchsorted(E4M3_GRID, x.clamp(-448, 448))
    low = E4M3_GRID[(index - 1).clamp(min=0)]
    high = E4M3_GRID[index.clamp(max=len(E4M3_GRID) - 1)]
    below, above = x - low, high - x
    even_high = (high.to(torch.float8_e4m3fn).view(torch.uint8) & 1) == 0
    return torch.where((below < above) | ((below == above) & ~even_high), low, high)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    k_blocks=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**16),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
)
def test_native_flavour_is_float64_rounding_of_a_float32_division(
    n: int, k_blocks: int, seed: int, dtype: torch.dtype
) -> None:
    """scale = amax / 448 (exact in float32: one correctly rounded division), and each code is the nearest E4M3
    value to the float32 quotient w / scale, computed here in float64."""
    weight = _weight(n, 128 * k_blocks, seed, dtype)
    if n < 128:
        weight[:, :128] = 0  # an all-zero block
    codes, scale = fp8_block.native_quantize(weight)
    w64 = weight.to(torch.float64)
    blocks = torch.nn.functional.pad(w64, (0, 0, 0, -n % 128)).reshape(-1, 128, k_blocks, 128)
    amax = blocks.abs().amax(dim=(1, 3))
    assert torch.equal(scale.to(torch.float64), torch.where(amax == 0, 1.0, (amax / 448).to(torch.float32).double()))
    full = scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    quotient = (weight.to(torch.float32) / full.to(torch.float32)).to(torch.float64)
    assert torch.equal(codes.to(torch.float64), _nearest_e4m3(quotient))
    assert codes.to(torch.float64).abs().amax() <= 448


@pytest.mark.parametrize("quantize", [fp8_block.native_quantize, fp8_block.compressed_tensors_quantize])
@pytest.mark.parametrize("n", [1, 127, 128, 300])
def test_aligned_row_blocks_give_the_bytes_of_the_whole(quantize, n: int) -> None:
    """What the pipeline relies on: a block of rows that starts on a 128-row boundary is quantized alone."""
    weight = _weight(n, 256, n)
    whole_codes, whole_scale = quantize(weight)
    for rows in row_blocks(n, 256, block_elements=3 * 256, align=128):
        assert rows.start % 128 == 0
        codes, scale = quantize(weight[rows])
        assert torch.equal(codes.view(torch.uint8), whole_codes[rows].view(torch.uint8))
        assert torch.equal(scale, whole_scale[rows.start // 128 : -(-rows.stop // 128)])


def test_a_block_amax_maps_to_448_and_zero_blocks_to_zero() -> None:
    weight = _weight(256, 256, 3)
    weight[128:, 128:] = 0
    for quantize in (fp8_block.native_quantize, fp8_block.compressed_tensors_quantize):
        codes, scale = quantize(weight)
        values = codes.to(torch.float32).reshape(2, 128, 2, 128).abs().amax(dim=(1, 3))
        assert values[0, 0] == values[0, 1] == values[1, 0] == 448
        assert values[1, 1] == 0 and scale[1, 1] > 0


@pytest.mark.parametrize("k", [128, 384, 200])
def test_group_activations_match_a_float64_reference(k: int) -> None:
    x = torch.randn(6, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    x[0] = 0
    x[1, :128] *= 1e-6  # a group whose scale hits the floor
    kind = ACTIVATION_KINDS["fp8-group"]
    codes, scale = quantize_token_groups(x, 128, kind.min_scale)
    x64 = torch.nn.functional.pad(x.to(torch.float64), (0, -k % 128)).reshape(6, -1, 128)
    expected_scale = (x64.abs().amax(dim=2) / 448).to(torch.float32).clamp_min(kind.min_scale)
    assert torch.equal(scale, expected_scale)
    quotient = (x.to(torch.float32) / scale.repeat_interleave(128, 1)[:, :k]).to(torch.float64)
    assert torch.equal(codes.to(torch.float64), _nearest_e4m3(quotient))
    assert torch.equal(dequantize_token_groups(codes, scale), kind.simulate(x))


def _stored(weight: torch.Tensor, activation: str | None) -> StoredLinear:
    codes, scale = fp8_block.native_quantize(weight)
    return StoredLinear(FP8_BLOCK, codes, block_scale=scale, activation_kind=activation_kind(activation))


@pytest.mark.parametrize("shape", [(3, 80, 256), (5, 200, 128), (16, 129, 384)], ids=str)
@pytest.mark.parametrize("activation", ["fp8-group", None])
def test_triton_kernel_matches_the_reference(shape: tuple[int, int, int], activation: str | None) -> None:
    triton_linear = triton_kernel()

    m, n, k = shape
    weight = _weight(n, k, m)
    weight[:128, -128:] = 0  # an all-zero block
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
    x[-1, :128] *= 40  # an outlier group
    stored = _stored(weight, activation)
    expected = reference_linear(x, stored)
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE)).cpu()
    assert torch.isfinite(got).all()
    assert (got - expected).abs().max() <= 2e-5 * expected.abs().max()


def test_triton_kernel_dequantizes_bit_exactly() -> None:
    triton_linear = triton_kernel()

    stored = _stored(_weight(200, 256, 9), None)
    eye = torch.eye(256, dtype=torch.bfloat16)
    got = triton_linear(eye.to(DEVICE), stored.to(DEVICE)).cpu().T
    assert torch.equal(got, stored.dequantize())


def test_rows_of_a_stored_linear_start_on_a_scale_block() -> None:
    stored = _stored(_weight(300, 128, 4), "fp8-group")
    part = stored.rows(slice(128, 300))
    assert torch.equal(part.dequantize(), stored.dequantize()[128:300])
    assert torch.equal(stored.dequantize_rows(slice(100, 260)), stored.dequantize()[100:260])
    with pytest.raises(ValueError, match="scale block"):
        stored.rows(slice(100, 200))


@pytest.mark.parametrize("flavour", ["compressed_tensors_quantize", "native_quantize"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_aligned_weights_take_the_in_place_blocks_and_give_the_padded_path_bytes(flavour: str, dtype) -> None:
    """A weight whose rows and columns are multiples of 128 is quantized on a view of its blocks; one more (zero)
    row sends the same weight through the padded path, which must give the same codes and scales."""
    quantize = getattr(fp8_block, flavour)
    generator = torch.Generator().manual_seed(7)
    weight = (torch.randn(256, 384, generator=generator) * 0.05).to(dtype)
    weight[:128, 128:256] = 0  # an all-zero block
    weight[200, 5] = -3.0  # a block dominated by one value
    codes, scale = quantize(weight)
    padded_codes, padded_scale = quantize(torch.cat((weight, torch.zeros(1, 384, dtype=dtype))))
    assert torch.equal(codes.view(torch.uint8), padded_codes[:256].view(torch.uint8))
    assert torch.equal(scale, padded_scale[:2])
