"""FP8 per-channel math against a float64 reference, with property tests for rounding edge cases."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.numerics import fp8

# Every finite positive float8_e4m3fn value, from the bit patterns (0x01..0x7E).
FP8_GRID = torch.arange(1, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)


def reference_round_fp8(x: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest-even onto the E4M3 grid in float64, saturating at 448 (what the clamp guarantees)."""
    grid = torch.cat([torch.zeros(1, dtype=torch.float64), FP8_GRID])
    mag = x.abs().clamp(max=448.0)
    idx = torch.searchsorted(grid, mag).clamp(1, len(grid) - 1)
    lo, hi = grid[idx - 1], grid[idx]
    pick_hi = (hi - mag < mag - lo) | ((hi - mag == mag - lo) & (idx % 2 == 0))  # even code index = even mantissa
    out = torch.where(pick_hi, hi, lo)
    out = torch.where(mag == lo, lo, out)
    return torch.copysign(out, x)


def reference_quark(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    amax = w.abs().amax(dim=1).to(torch.float64)
    scale = (amax.to(torch.float32) / 448).to(torch.float64)
    scale = torch.where(scale == 0, torch.finfo(torch.float32).eps, scale)
    s_in = scale.to(w.dtype).to(torch.float64)
    s_in = torch.where(s_in == 0, scale.to(torch.float32).to(torch.float64), s_in)  # fp16 underflow: see fp8.py
    scaled = (w.to(torch.float64) / s_in.unsqueeze(1)).to(w.dtype).to(torch.float64)  # the division rounds to w.dtype
    return reference_round_fp8(scaled), scale


def _check(w: torch.Tensor) -> None:
    q, scale = fp8.quark_per_channel(w)
    ref_q, ref_scale = reference_quark(w)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.shape == (w.shape[0],)
    assert torch.equal(scale.to(torch.float64), ref_scale)
    got = q.to(torch.float64)
    assert torch.equal(got, ref_q), (w, got, ref_q)
    assert torch.equal(torch.signbit(got), torch.signbit(ref_q))  # -0 stays -0


def test_exact_ties_round_to_even() -> None:
    s = 2.0**-10
    w = torch.tensor([[448 * s, 1.0625 * s, 1.1875 * s, -(2.0**-20), 0.0, 3.5 * s]], dtype=torch.bfloat16)
    q, scale = fp8.quark_per_channel(w)
    assert scale.item() == s
    assert q.to(torch.float32).tolist() == [[448.0, 1.0, 1.25, -0.0, 0.0, 3.5]]
    assert q.view(torch.uint8)[0, 3].item() == 0x80  # a negative value rounding to zero keeps its sign


def test_zero_row_gets_eps_scale_and_zero_codes() -> None:
    q, scale = fp8.quark_per_channel(torch.zeros(2, 32, dtype=torch.bfloat16))
    assert torch.all(scale == torch.finfo(torch.float32).eps)
    assert torch.all(q.view(torch.uint8) == 0)


def test_fp16_row_whose_scale_underflows_is_not_nan() -> None:
    """amd-quark 0.13 writes NaN / +-448 here (its fp16 divisor rounds to 0); we divide those rows in fp32."""
    w = torch.tensor([[2e-6, -1e-6, 0.0, 5e-7], [0.5, 0.25, 0.0, -1.0]], dtype=torch.float16)
    q, scale = fp8.quark_per_channel(w)
    assert torch.isfinite(q.to(torch.float32)).all()
    assert scale[0].to(torch.float16).item() == 0  # the case Quark mishandles
    deq = fp8.dequantize_per_channel(q, scale)
    assert torch.allclose(deq, w.to(torch.float32), rtol=0.07, atol=0)
    assert q.to(torch.float32)[0, 0].item() == 448.0
    _check(w)


def test_reconstruction_error_against_float64() -> None:
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(0), dtype=torch.float32).to(torch.bfloat16)
    q, scale = fp8.quark_per_channel(w)
    deq = fp8.dequantize_per_channel(q, scale).to(torch.float64)
    rel = (deq - w.to(torch.float64)).norm() / w.to(torch.float64).norm()
    assert rel < 0.04  # E4M3 has a 3-bit mantissa: worst-case relative rounding error 1/16 per element


finite_values = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(finite_values, min_size=4, max_size=4), min_size=1, max_size=4),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
)
def test_matches_float64_reference(rows: list[list[float]], dtype: torch.dtype) -> None:
    w = torch.tensor(rows, dtype=torch.float32).to(dtype)
    if not torch.isfinite(w).all():
        return  # fp16 overflow: NaN/Inf weights are refused before quantization
    _check(w)


@settings(max_examples=200, deadline=None)
@given(
    exponent=st.integers(min_value=-20, max_value=4),
    codes=st.lists(st.integers(min_value=0, max_value=0xFF), min_size=1, max_size=16),
)
def test_values_on_the_fp8_grid_and_between_survive(exponent: int, codes: list[int]) -> None:
    """Rows whose scale is a power of two: FP8 codes and exact midpoints between them."""
    s = 2.0**exponent
    grid = torch.tensor(codes, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    grid = torch.where(torch.isfinite(grid), grid, torch.zeros_like(grid))
    mids = grid * 1.0625  # on or between grid points, exactly representable in bf16
    row = torch.cat([torch.tensor([448.0]), grid, mids]) * s
    _check(row.unsqueeze(0).to(torch.bfloat16))


def test_e4m3_lookup_matches_torch_for_every_code() -> None:
    from eaglequant.numerics.fp8 import e4m3_to_float32

    codes = torch.arange(256, dtype=torch.uint8).repeat(3).reshape(3, 256).view(torch.float8_e4m3fn)
    expected = codes.to(torch.float32)
    actual = e4m3_to_float32(codes)
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    # bit for bit: -0.0 keeps its sign and both NaN codes stay NaN
    assert torch.equal(actual.view(torch.int32)[~expected.isnan()], expected.view(torch.int32)[~expected.isnan()])
    assert torch.equal(actual.isnan(), expected.isnan()) and int(expected.isnan().sum()) == 6
    strided = codes[:, ::3]  # a non-contiguous view converts the same
    assert torch.equal(e4m3_to_float32(strided).nan_to_num(), strided.to(torch.float32).nan_to_num())
