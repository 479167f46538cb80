"""INT8 W8A8 (int8-channel weights, int8-token activations): the math against a float64 definition, property tests
for its rounding edges, the kind and recipe, the Triton kernel against the reference, and the engine-load cells.
Byte-for-byte parity with llm-compressor's ``W8A8`` runs in tests/formats/test_vendor_parity.py (conftest's
session oracle, over every fixture and the edge checkpoints of :func:`tests.conftest.int_edge_tensors`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.kinds import INT8_CHANNEL, INT8_TOKEN, StoredLinear, activation_kind, weight_kind
from eaglequant.numerics import int8
from tests.kernels.under_triton import DEVICE, gemm_case, triton_kernel

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def reference_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llm-compressor's W8A8 weights defined in float64, each operation rounded once to the weight's dtype D (a
    float64 result of one operation on D values, rounded to D, is what a CPU's float32 operation rounded to D gives:
    24 >= 2 * 11 + 2 bits)."""
    dtype = w.dtype

    def to_d(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).to(torch.float64)

    w64 = w.to(torch.float64)
    amax = torch.maximum(-w64.amin(dim=1).clamp(max=0), w64.amax(dim=1).clamp(min=0))
    scale = to_d(amax / 127.5)
    scale = torch.where(scale == 0, torch.finfo(dtype).eps, scale)
    scaled = to_d(w64 / scale[:, None]).clamp(-128, 127)
    return torch.round(scaled), scale  # float64 rounds half to even


weights = st.lists(
    st.floats(min_value=-3e4, max_value=3e4, allow_nan=False, allow_subnormal=True, width=32), min_size=4, max_size=48
)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(weights, min_size=1, max_size=4), dtype=st.sampled_from(DTYPES), zero_row=st.booleans())
def test_weights_match_the_float64_definition(rows: list[list[float]], dtype: torch.dtype, zero_row: bool) -> None:
    width = min(len(r) for r in rows)
    w = torch.tensor([r[:width] for r in rows], dtype=torch.float64).to(dtype)
    if zero_row:
        w[0] = 0
    q, scale = int8.compressed_tensors_per_channel(w)
    ref_q, ref_scale = reference_weights(w)
    assert q.dtype == torch.int8 and scale.dtype == dtype and scale.shape == (w.shape[0], 1)
    assert torch.equal(scale.reshape(-1).to(torch.float64), ref_scale)
    assert torch.equal(q.to(torch.float64), ref_q)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(weights, min_size=1, max_size=3), dtype=st.sampled_from(DTYPES))
def test_every_weight_is_within_half_a_step_and_the_largest_lands_on_127(
    rows: list[list[float]], dtype: torch.dtype
) -> None:
    width = min(len(r) for r in rows)
    w = torch.tensor([r[:width] for r in rows], dtype=torch.float64).to(dtype)
    q, scale = int8.compressed_tensors_per_channel(w)
    s = scale.to(torch.float64)
    error = (q.to(torch.float64) * s - w.to(torch.float64)).abs()
    # half a step, plus the rounding of w / scale to D before it is rounded to an integer (up to 128 * eps / 2), plus
    # the clamp at 127 of a value 127.5 (half a step more)
    bound = s * (1.0 + 128 * torch.finfo(dtype).eps)
    assert torch.all(error <= bound)
    assert q.min() >= -128 and q.max() <= 127
    normal = w.abs().amax(dim=1).to(torch.float64) / 127.5 >= torch.finfo(dtype).tiny  # no underflow to eps
    largest = q.to(torch.int32).abs().amax(dim=1)
    # amax / scale is about 127.5: clamped to 127 before rounding, or for a negative amax rounded to -128 (even)
    assert torch.all((largest[normal] == 127) | (largest[normal] == 128))


def test_double_rounding_in_bfloat16() -> None:
    """w / scale is rounded to bf16 (steps of 0.25 between 32 and 64) before it is rounded to an integer."""
    w = torch.tensor([[1.9453125, -0.55859375, 0.0]], dtype=torch.bfloat16)
    q, scale = int8.compressed_tensors_per_channel(w)
    assert scale.item() == 0.0152587890625  # bf16(1.9453125 / 127.5)
    # -36.608... -> bf16 -36.5 -> -36, where rounding the exact quotient would give -37
    assert q.tolist() == [[127, -36, 0]]
    assert round(float(w[0, 1]) / scale.item()) == -37


def test_the_range_is_asymmetric_like_the_vendors() -> None:
    """scale = amax / 127.5: +amax clamps to 127, -amax is -127.5, which rounds half to even to -128."""
    q, _ = int8.compressed_tensors_per_channel(torch.tensor([[3.0, -1.5, 0.0, 0.0], [-3.0, 1.5, 0.0, 0.0]]))
    assert q.tolist() == [[127, -64, 0, 0], [-128, 64, 0, 0]]


def test_zero_row_gets_eps_and_zero_codes() -> None:
    q, scale = int8.compressed_tensors_per_channel(torch.zeros(2, 16, dtype=torch.bfloat16))
    assert torch.all(scale == torch.finfo(torch.bfloat16).eps) and torch.all(q == 0)


def reference_quark(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AMD Quark's INT8 per channel in float64: scale = fp32(D(amax / 127.5)) floored at fp32's eps, codes =
    round_even(clamp(fp32(fp32(w) * fp32(1 / scale))))."""
    amax = w.to(torch.float64).abs().amax(dim=1)
    scale = (amax / 127.5).to(w.dtype).to(torch.float32).to(torch.float64)
    scale = scale.clamp(min=torch.finfo(torch.float32).eps)
    inverse = (1.0 / scale).to(torch.float32).to(torch.float64)
    product = (w.to(torch.float64) * inverse[:, None]).to(torch.float32).to(torch.float64)
    return torch.round(product.clamp(-128, 127)), scale


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(weights, min_size=1, max_size=4), dtype=st.sampled_from(DTYPES), tiny_row=st.booleans())
def test_quark_weights_match_the_float64_definition(
    rows: list[list[float]], dtype: torch.dtype, tiny_row: bool
) -> None:
    width = min(len(r) for r in rows)
    w = torch.tensor([r[:width] for r in rows], dtype=torch.float64).to(dtype)
    if tiny_row:
        w[0] *= 1e-8  # its scale falls below float32's eps, which Quark keeps as the floor
    q, scale = int8.quark_per_channel(w)
    ref_q, ref_scale = reference_quark(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (w.shape[0],)
    assert torch.equal(scale.to(torch.float64), ref_scale)
    assert torch.equal(q.to(torch.float64), ref_q)


def test_quark_multiplies_by_the_reciprocal() -> None:
    """0.0029754638671875 / 0.000457763671875 is exactly 6.5 (half to even: 6), but Quark multiplies by the float32
    reciprocal: 6.5000005, so 7 (seen on the specforge-llama fixture's fc)."""
    w = torch.tensor([[0.058349609375, 0.0029754638671875, -0.0029754638671875]], dtype=torch.bfloat16)
    q, scale = int8.quark_per_channel(w)
    assert scale.item() == 0.000457763671875
    assert q.tolist() == [[127, 7, -7]]


def reference_tokens(x: torch.Tensor) -> torch.Tensor:
    """The engines' dynamic per-token INT8 in float64: inverse = fp32(127 / amax), codes = round_even(fp32(x * inv))."""
    x32 = x.to(torch.float32)
    amax = x32.abs().amax(dim=1).clamp_min(1e-10).to(torch.float64)
    inverse = (127.0 / amax).to(torch.float32).to(torch.float64)
    codes = torch.round((x32.to(torch.float64) * inverse[:, None]).to(torch.float32).to(torch.float64))
    scale = (amax / 127.0).to(torch.float32).to(torch.float64)
    return (codes.clamp(-128, 127) * scale[:, None]).to(torch.float32).to(torch.float64)  # one float32 product


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=16), min_size=8, max_size=8), min_size=1, max_size=5)
)
def test_token_quantization_matches_the_engines_definition(rows: list[list[float]]) -> None:
    x = torch.tensor(rows, dtype=torch.float32).to(torch.bfloat16)
    got = int8.simulate_tokens(x).to(torch.float64)
    assert torch.equal(got, reference_tokens(x))


def test_token_ties_round_to_even_and_the_division_is_one_ieee_division() -> None:
    x = torch.tensor([[254.0, 125.0, 123.0, -125.0], [3.515625, 1.7578125, 0.0, 0.0], [0.0] * 4])
    codes, scale = int8.quantize_tokens(x)
    assert codes[0].tolist() == [127, 62, 62, -62]  # 62.5 -> 62, 61.5 -> 62 (half away from zero gives 63, 62)
    # fp32(127 / 3.515625) * 1.7578125 = 63.4999962 -> 63; torch's ``127 / amax`` (a reciprocal, then a product)
    # would give 63.5000038 -> 64
    assert codes[1, 1].item() == 63
    assert round(float(x[1, 1] * (127 / x[1, :1].abs().amax()))) == 64
    assert codes[2].tolist() == [0, 0, 0, 0] and scale[2].item() == pytest.approx(1e-10 / 127)


def test_the_kind_and_its_recipe() -> None:
    from eaglequant.formats import get_format
    from eaglequant.formats.quant_config import QuantConfig
    from eaglequant.schemes.model import load_scheme

    kind = weight_kind("int8-channel")
    scheme = load_scheme("int8")
    assert scheme.kinds == ("int8-channel", "int8-token") and scheme.label == "W8A8"
    assert (kind.bits, kind.stored_dtype, kind.codes_per_element, kind.in_features(96)) == (8, "I8", 1, 96)
    fmt = get_format("compressed-tensors")
    assert fmt.algorithm(scheme) == "W8A8"
    assert [get_format(name).supports(scheme) for name in ("quark", "modelopt", "fp8")] == [True, False, False]
    quark_config = get_format("quark").write_config(QuantConfig.flat(scheme.kinds)).quantization_config
    quark = quark_config["global_quant_config"]
    assert quark["weight"]["dtype"] == quark["input_tensors"]["dtype"] == "int8"
    assert (quark["weight"]["ch_axis"], quark["input_tensors"]["ch_axis"], quark["input_tensors"]["is_dynamic"]) == (
        0,
        1,
        True,
    )
    config = fmt.write_config(QuantConfig.flat(scheme.kinds)).quantization_config
    group = config["config_groups"]["W8A8"]
    assert (
        config["format"] == "int-quantized" and group["weights"]["type"] == group["input_activations"]["type"] == "int"
    )
    assert fmt.read_config(config, {}).kinds == scheme.kinds


# -- the Triton kernel (interpreted on CPU), against the torch reference ------------------------------------------


@pytest.mark.parametrize("activation", ["int8-token", None])
@pytest.mark.parametrize("shape", [(3, 80, 128), (16, 64, 256), (5, 33, 96)], ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_the_reference(shape: tuple[int, int, int], activation: str | None) -> None:
    from eaglequant.kernels.reference import reference_linear

    triton_linear = triton_kernel()

    weight, x = gemm_case(shape)
    k = shape[2]
    q, scale = int8.compressed_tensors_per_channel(weight)
    stored = StoredLinear(
        INT8_CHANNEL, q, channel_scale=scale.float().reshape(-1), activation_kind=activation_kind(activation)
    )
    expected = reference_linear(x, stored)
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE)).cpu()
    # integer products summed exactly in float32 on the kernel's side; the reference rounds each product
    assert (got - expected).abs().max() <= 2e-6 * expected.abs().max()
    eye = torch.eye(k, dtype=torch.bfloat16)
    weight_only = StoredLinear(INT8_CHANNEL, q, channel_scale=scale.float().reshape(-1))
    assert torch.equal(triton_linear(eye.to(DEVICE), weight_only.to(DEVICE)).cpu().T, weight_only.dequantize())


def test_kernel_rounds_tokens_like_the_reference() -> None:
    triton_linear = triton_kernel()

    k = 128
    x = torch.randn(6, k, generator=torch.Generator().manual_seed(3)) * 3
    x[0, :4] = torch.tensor([254.0, 125.0, 123.0, -125.0])  # exact ties after scaling
    x[1] = 0
    x = x.to(torch.bfloat16)
    identity = StoredLinear(
        INT8_CHANNEL, torch.eye(k, dtype=torch.int8), channel_scale=torch.ones(k), activation_kind=INT8_TOKEN
    )
    assert torch.equal(triton_linear(x, identity), int8.simulate_tokens(x))


# -- engine-load cells -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_loading_cell_is_an_engine_load_case(engine: str) -> None:
    """The engine-load tests build their cases from the matrix: the int8 cell that loads is loaded on a Llama and an
    MLA fixture by the engine's own code (tests/engine_load/test_engine_load.py)."""
    from eaglequant.engines import ENGINES
    from eaglequant.engines.support import support
    from tests.engine_load.test_engine_load import matrix_cases

    kinds = ("int8-channel", "int8-token")
    cell = support(kinds, "compressed-tensors", ENGINES[engine])
    assert cell is not None and cell.loads
    cases = [c for c in matrix_cases(engine) if c.scheme == "int8"]
    assert {c.fixture for c in cases if c.loads} >= {"specforge-llama", "torchspec-mla"}  # a Llama and an MLA head
