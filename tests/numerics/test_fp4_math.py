"""FP4 building blocks against float64 definitions (hypothesis), and the plan-level rules around them:
fused groups share NVFP4 scales, awkward in-dimensions stay unquantized, calibration reads real inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from eaglequant import convert
from eaglequant.common.findings import codes, find
from eaglequant.numerics import fp4, mxfp4, nvfp4
from tests.conftest import FIXTURES, write_calibration

GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
finite = st.floats(min_value=-20, max_value=20, allow_nan=False, width=32)


def nearest_even_code(x: float) -> int:
    """Round-to-nearest on the E2M1 grid in float64; ties to the even code; saturate at 6."""
    a = min(abs(x), 6.0)
    best = min(range(8), key=lambda c: (abs(GRID[c] - a), c % 2))
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(finite, min_size=2, max_size=64).filter(lambda v: len(v) % 2 == 0), st.booleans())
def test_e2m1_codes_are_nearest_even(values: list[float], negative_zero: bool) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    codes = fp4.e2m1_codes(x, negative_zero=negative_zero)
    for value, code in zip(values, codes.tolist(), strict=True):
        magnitude = nearest_even_code(value)
        sign = value < 0 and (negative_zero or magnitude != 0)
        assert code == magnitude | (8 if sign else 0), value
    assert torch.equal(fp4.unpack_codes(fp4.pack_codes(codes)), codes)


def test_e2m1_codes_on_every_bfloat16_and_beside_every_midpoint() -> None:
    """The bit-level encoder against the float64 definition on all 65536 bf16 values (scaled into range) and
    on the float32 neighbours of every midpoint and grid point, where an off-by-one-ulp rounding would show."""
    every_bf16 = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(torch.float32)
    every_bf16 = every_bf16[torch.isfinite(every_bf16)]
    points = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, *GRID[1:], 7.0])
    below, above = torch.nextafter(points, torch.zeros(1)), torch.nextafter(points, torch.full((1,), 9.0))
    beside = torch.cat([below, points, above])
    for x in (every_bf16, every_bf16 * 2.0**-120, torch.cat([beside, -beside])):
        for negative_zero in (True, False):
            codes = fp4.e2m1_codes(x, negative_zero=negative_zero).tolist()
            for value, code in zip(x.tolist(), codes, strict=True):
                magnitude = nearest_even_code(value)
                sign = value < 0 and (negative_zero or magnitude != 0)
                assert code == magnitude | (8 if sign else 0), value


@pytest.mark.slow
def test_the_code_table_equals_the_arithmetic_encoder_on_every_top_half() -> None:
    """The table encoder claims a code depends only on a float32's top 16 bits and on whether its low 16 bits are
    zero: checked against the arithmetic definition for every top half (all signs, exponents, NaN and infinity)
    with low halves 0, 1 and three others. (All 2^32 patterns agree too: about 8 minutes, run once by hand.)"""
    top = torch.arange(1 << 16, dtype=torch.int32) << 16
    for low in (0, 1, 0x8000, 0xFFFF, 0x1234):
        x = (top | low).view(torch.float32)
        for negative_zero in (True, False):
            table = fp4.e2m1_codes(x, negative_zero=negative_zero)
            assert torch.equal(table, fp4.e2m1_codes_arithmetic(x, negative_zero=negative_zero)), (low, negative_zero)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=2, max_size=40).filter(lambda v: len(v) % 2 == 0), st.integers(0, 1))
def test_packing_an_odd_offset_view_or_a_copy_gives_the_same_bytes(codes: list[int], offset: int) -> None:
    buffer = torch.tensor([0, *codes, 0], dtype=torch.uint8)
    view = buffer[offset : offset + len(codes)]  # at offset 1 it cannot be read as int16 pairs
    values = view.tolist()
    expected = [values[i] | values[i + 1] << 4 for i in range(0, len(values), 2)]
    assert fp4.pack_codes(view).tolist() == expected
    assert fp4.pack_codes(view.clone()).tolist() == expected


def test_block_amax_is_the_float_maximum_of_magnitudes() -> None:
    values = torch.tensor([[-3.0, 2.0, float("inf"), -0.0], [-0.0, 0.0, -1e-40, 5e-41], [1.0, -7.5, 7.5, 2.0]])
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = values.to(dtype)
        assert torch.equal(fp4.block_amax(x), x.abs().amax(-1)), dtype
    assert torch.isnan(fp4.block_amax(torch.tensor([[1.0, float("nan")]], dtype=torch.bfloat16))).all()


def test_packed_bytes_decode_to_their_two_values() -> None:
    every_byte = torch.arange(256, dtype=torch.uint8).reshape(2, 128)
    signed = GRID + tuple(-v for v in GRID)
    expected = [[signed[c] for c in row] for row in fp4.unpack_codes(every_byte).tolist()]
    assert fp4.decode_packed(every_byte).tolist() == expected


def test_e2m1_ties_and_signs() -> None:
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.0, 7.0])
    assert fp4.e2m1_codes(ties, negative_zero=True).tolist() == [0, 2, 2, 4, 4, 6, 6, 8, 0, 7]
    assert fp4.e2m1_codes(ties, negative_zero=False).tolist() == [0, 2, 2, 4, 4, 6, 6, 0, 0, 7]
    assert fp4.pack_codes(torch.tensor([[1, 15]], dtype=torch.uint8)).tolist() == [[0xF1]]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=2.0**-100, max_value=2.0**100, allow_nan=False, width=32))
def test_mx_shared_exponent_matches_definition(amax: float) -> None:
    mantissa, exponent = math.frexp(amax)  # amax = mantissa * 2**exponent, mantissa in [0.5, 1)
    significand, log2 = mantissa * 2, exponent - 1
    expected = (log2 + 1 if significand >= 1.75 else log2) - 2
    got = int(mxfp4.shared_exponents(torch.tensor([amax], dtype=torch.float32))[0])
    assert got == max(expected, -127)


def test_mx_zero_block_encodings() -> None:
    zeros = torch.zeros(1, 32)
    assert mxfp4.quark_quantize(zeros)[1].item() == 1  # Quark stores 2^-126 for e = -127
    assert mxfp4.compressed_tensors_quantize(zeros)[1].item() == 0
    assert mxfp4.compressed_tensors_quantize(zeros.half())[1].item() == 127  # 2^-127 underflows in fp16


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_mx_dequantization_error_is_bounded(seed: int) -> None:
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    packed, scale = mxfp4.quark_quantize(w)
    error = (mxfp4.dequantize(packed, scale) - w.float()).abs().reshape(4, 2, 32)
    step = torch.exp2(scale.float() - 127).unsqueeze(-1)  # largest grid step (2) times scale / 2 = scale
    assert bool((error <= step + 1e-30).all())


def read_all(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for file in path.glob("*.safetensors"):
        with safe_open(file, "pt") as handle:
            for name in handle.keys():  # noqa: SIM118
                out[name] = handle.get_tensor(name)
    return out


@pytest.mark.parametrize("fmt", ["modelopt", "compressed-tensors"])
def test_fused_groups_share_the_nvfp4_global_scale_across_shards(fmt: str, tmp_path: Path) -> None:
    """sharded-split puts q, k/v and gate, up in different shards."""
    result = convert(FIXTURES / "sharded-split", tmp_path / "out", scheme="nvfp4", format=fmt)
    tensors = read_all(result.destination)
    source = read_all(FIXTURES / "sharded-split")
    suffix = "weight_scale_2" if fmt == "modelopt" else "weight_global_scale"
    for members in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
        block = "self_attn" if members[0] == "q_proj" else "mlp"
        names = [f"midlayer.{block}.{m}" for m in members]
        scales = {tensors[f"{n}.{suffix}"].item() for n in names}
        assert len(scales) == 1, names
        amax = max(source[f"{n}.weight"].abs().max().float().item() for n in names)
        expected = amax / 2688 if fmt == "modelopt" else 2688 / amax
        assert scales.pop() == pytest.approx(expected, rel=1e-2)
    # o_proj is not fused: the scale comes from its own amax
    o_amax = source["midlayer.self_attn.o_proj.weight"].abs().max().float().item()
    o_expected = o_amax / 2688 if fmt == "modelopt" else 2688 / o_amax
    assert tensors[f"midlayer.self_attn.o_proj.{suffix}"].item() == pytest.approx(o_expected, rel=1e-2)


def test_awkward_in_dimension_stays_unquantized_with_a_note(tmp_path: Path) -> None:
    """awkward-fp32: down_proj has 208 in-features (a multiple of 16, not of 32)."""
    mx = convert(FIXTURES / "awkward-fp32", tmp_path / "mx", scheme="mxfp4", format="quark")
    assert "midlayer.mlp.down_proj.weight" in mx.plan.excluded_linears
    assert find(mx.plan.notes, "kept-unstorable").subject == "midlayer.mlp.down_proj"
    assert read_all(mx.destination)["midlayer.mlp.down_proj.weight"].dtype == torch.float32
    nv = convert(FIXTURES / "awkward-fp32", tmp_path / "nv", scheme="nvfp4", format="modelopt")
    assert "midlayer.mlp.down_proj.weight" not in nv.plan.excluded_linears


def test_calibration_measures_the_real_inputs(tmp_path: Path) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.draft.calibrate import calibrate
    from eaglequant.draft.forward import rms_norm
    from eaglequant.layouts.detect import describe_head

    calib = write_calibration("specforge-llama", tmp_path / "calib.safetensors")
    data = read_all_file(calib)
    with Checkpoint.open(FIXTURES / "specforge-llama") as checkpoint:
        head = describe_head(checkpoint)
        amax = calibrate(checkpoint, head, calib)
        w = {n: checkpoint.read(n).double() for n in checkpoint.tensors}
    hidden = data["hidden_states"].double()
    assert amax["fc"] == pytest.approx(hidden.abs().max().item(), rel=1e-6)
    eps = json.loads((FIXTURES / "specforge-llama" / "config.json").read_text())["rms_norm_eps"]
    fc_out = hidden @ w["fc.weight"].T
    embeds = w["embed_tokens.weight"][data["input_ids"]]
    x = torch.cat(
        (
            rms_norm(embeds, w["midlayer.input_layernorm.weight"], eps),
            rms_norm(fc_out, w["midlayer.hidden_norm.weight"], eps),
        ),
        -1,
    )
    for member in ("q_proj", "k_proj", "v_proj"):
        assert amax[f"layers.0.self_attn.{member}"] == pytest.approx(x.abs().max().item(), rel=1e-4)
    result = convert(FIXTURES / "specforge-llama", tmp_path / "out", scheme="nvfp4", format="modelopt", calib=calib)
    assert result.plan.scheme.label == "W4A4" and "no-calib-data" not in codes(result.plan.notes)
    tensors = read_all(result.destination)
    assert tensors["midlayer.self_attn.q_proj.input_scale"].item() == pytest.approx(
        x.abs().max().item() / 2688, rel=1e-4
    )


def test_nvfp4_without_calibration_is_written_w4a16_and_says_so(tmp_path: Path) -> None:
    result = convert(FIXTURES / "specforge-llama", tmp_path / "out", scheme="nvfp4", format="modelopt")
    assert result.plan.scheme.label == "W4A16"
    assert "no-calib-data" in codes(result.plan.notes)
    assert (
        json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]["quant_algo"] == "W4A16_NVFP4"
    )
    assert not any(name.endswith("input_scale") for name in read_all(result.destination))


def read_all_file(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(path, "pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118


@pytest.mark.vendor
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_an_all_zero_weight_is_what_modelopt_writes(dtype: torch.dtype) -> None:
    """weight_scale_2 = 0 makes every block scale 0 / 0: ModelOpt writes code 7 (its searchsorted puts NaN past every
    bound) and a NaN scale. The NaN's sign is the device's, so the CPU's bytes are spelled out (a GPU must match)."""
    modelopt = pytest.importorskip("modelopt.torch.quantization.qtensor.nvfp4_tensor")
    weight = torch.zeros(2, 32, dtype=dtype)
    theirs, their_scale, their_scale_2 = modelopt.NVFP4QTensor.quantize(weight.clone(), 16)
    packed, scale = nvfp4.modelopt_quantize(weight, nvfp4.modelopt_global_scale(weight.abs().max().float()))
    assert float(their_scale_2) == 0.0
    assert torch.equal(packed, theirs._quantized_data) and bool((packed == 0x77).all())
    scale_bytes = scale.view(torch.uint8)
    assert torch.equal(scale_bytes, their_scale.view(torch.uint8)) and bool((scale_bytes == 0xFF).all())
