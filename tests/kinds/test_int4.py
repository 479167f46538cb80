"""INT4 W4A16 (int4-group, int4-group-asym): the math against a float64 definition, property tests for the int32
packing (order, padding), zero points, clamping and rounding, the kinds and recipes, the Triton kernel against the
reference, a written checkpoint read back by its kind, and the engine-load cells. Byte-for-byte parity with
llm-compressor's ``W4A16`` / ``W4A16_ASYM`` runs in tests/formats/test_vendor_parity.py (conftest's session oracle)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.kinds import INT4_GROUP, INT4_GROUP_ASYM, StoredLinear
from eaglequant.numerics import int4
from tests.kernels.under_triton import DEVICE, gemm_case, triton_kernel

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def reference_groups(w: torch.Tensor, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """llm-compressor's W4A16 / W4A16_ASYM in float64, each operation rounded once to the weight's dtype D:
    (codes [N, K] float64, scale [N, G], zero points [N, G] or None)."""
    dtype = w.dtype

    def to_d(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).to(torch.float64)

    n, k = w.shape
    groups = w.to(torch.float64).reshape(n, k // 128, 128)
    lo, hi = groups.amin(-1).clamp(max=0), groups.amax(-1).clamp(min=0)
    zero = None
    if symmetric:
        scale = to_d(torch.maximum(-lo, hi) / 7.5)
    else:
        scale = to_d(to_d(hi - lo) / 15.0)
        with torch.no_grad():
            zero = torch.round(to_d(-8.0 - to_d(lo / scale)).clamp(-8, 7))
        zero = torch.where(scale == 0, 0.0, zero)  # 0 / 0: NaN, cast to int8 0 by compressed-tensors on the CPU
    scale = torch.where(scale == 0, torch.finfo(dtype).eps, scale)
    scaled = to_d(groups / scale[..., None])
    if zero is not None:
        scaled = to_d(scaled + zero[..., None])
    return torch.round(scaled.clamp(-8, 7)).reshape(n, k), scale, zero


values = st.floats(min_value=-2e3, max_value=2e3, allow_nan=False, allow_subnormal=True, width=32)


@st.composite
def group_weights(draw: st.DrawFn) -> torch.Tensor:
    """[N, 128 or 256]: random values with whole groups zero, constant, all negative or all positive."""
    rows, groups = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dtype = draw(st.sampled_from(DTYPES))
    base = torch.tensor(draw(st.lists(values, min_size=16, max_size=16)), dtype=torch.float64)
    w = base.repeat(rows * groups * 8)[: rows * groups * 128].reshape(rows, groups * 128)
    w = w * torch.linspace(0.25, 1.0, groups * 128, dtype=torch.float64)
    for r in range(rows):
        for g in range(groups):
            kind = draw(st.sampled_from(["as is", "zero", "constant", "negative", "positive"]))
            part = w[r, g * 128 : (g + 1) * 128]
            if kind == "zero":
                part.zero_()
            elif kind == "constant":
                part.fill_(float(base[0]))
            elif kind == "negative":
                part.copy_(-part.abs())
            elif kind == "positive":
                part.copy_(part.abs())
    return w.to(dtype)


@settings(max_examples=200, deadline=None)
@given(w=group_weights(), symmetric=st.booleans())
def test_groups_match_the_float64_definition(w: torch.Tensor, symmetric: bool) -> None:
    packed, scale, zero = int4.compressed_tensors_quantize(w, symmetric)
    ref_codes, ref_scale, ref_zero = reference_groups(w, symmetric)
    n, k = w.shape
    assert packed.dtype == torch.int32 and packed.shape == (n, k // 8)
    assert scale.dtype == w.dtype and torch.equal(scale.to(torch.float64), ref_scale)
    assert torch.equal(int4.unpack_rows(packed, k).to(torch.float64), ref_codes)
    if symmetric:
        assert zero is None
    else:
        assert zero is not None and zero.dtype == torch.int8
        assert torch.equal(zero.to(torch.float64), ref_zero)


@settings(max_examples=150, deadline=None)
@given(w=group_weights(), symmetric=st.booleans())
def test_codes_and_zero_points_stay_in_range_and_within_a_step(w: torch.Tensor, symmetric: bool) -> None:
    packed, scale, zero = int4.compressed_tensors_quantize(w, symmetric)
    codes = int4.unpack_rows(packed, w.shape[1])
    assert codes.min() >= -8 and codes.max() <= 7
    if zero is not None:
        assert zero.min() >= -8 and zero.max() <= 7
    stored = StoredLinear(
        INT4_GROUP if symmetric else INT4_GROUP_ASYM, packed, block_scale=scale.float(), zero_point=zero
    )
    s = scale.to(torch.float64).repeat_interleave(128, dim=1)
    error = (stored.dequantize().to(torch.float64) - w.to(torch.float64)).abs()
    # half a step, the rounding of w / scale (and of + zero point) to D, and for an asymmetric group the zero
    # point's own rounding (up to half a step more, and the clamp of the zero point to [-8, 7])
    eps = torch.finfo(w.dtype).eps
    bound = s * ((0.5 + 16 * eps) if symmetric else (1.5 + 32 * eps))
    normal = s >= torch.finfo(w.dtype).tiny * 16  # an underflowing scale becomes eps and bounds nothing
    assert torch.all(error[normal] <= bound[normal] * 1.0001)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-8, 7), min_size=1, max_size=70), st.integers(1, 3))
def test_packing_order_padding_and_round_trip(codes: list[int], rows: int) -> None:
    """Element 8j + i is in bits 4i .. 4i + 3 of word j, as the nibble code + 8; the last word is zero-padded."""
    c = torch.tensor(codes * rows, dtype=torch.int8).reshape(rows, len(codes))
    packed = int4.pack_rows(c)
    assert packed.dtype == torch.int32 and packed.shape == (rows, -(-len(codes) // 8))
    for j in range(packed.shape[1]):
        word = sum((codes[8 * j + i] + 8) << (4 * i) for i in range(8) if 8 * j + i < len(codes))
        expected = word - (1 << 32) if word >= 1 << 31 else word  # two's complement: element 7 sets the sign bit
        assert int(packed[0, j]) == expected
    assert torch.equal(int4.unpack_rows(packed, len(codes)), c)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(-8, 7), min_size=3, max_size=3), min_size=8, max_size=40).filter(
        lambda r: len(r) % 8 == 0
    )
)
def test_zero_points_pack_along_the_out_dimension(rows: list[list[int]]) -> None:
    zero = torch.tensor(rows, dtype=torch.int8)  # [N, G]
    packed = int4.pack_zero_points(zero)
    assert packed.shape == (len(rows) // 8, 3) and packed.is_contiguous()
    for r in range(len(rows) // 8):
        for g in range(3):
            word = sum((rows[8 * r + i][g] + 8) << (4 * i) for i in range(8))
            assert int(packed[r, g]) == (word - (1 << 32) if word >= 1 << 31 else word)
    assert torch.equal(int4.unpack_zero_points(packed, len(rows)), zero)


def test_rounding_is_half_to_even_after_the_clamp() -> None:
    """Symmetric: scale = amax / 7.5, so +amax is 7.5 (clamped to 7) and -amax is -7.5 (rounded to -8, even);
    halves in between go to the even integer."""
    group = torch.zeros(1, 128, dtype=torch.float32)
    group[0, :6] = torch.tensor([7.5, -7.5, 2.5, 3.5, -0.5, 0.5])
    packed, scale, _ = int4.compressed_tensors_quantize(group, symmetric=True)
    assert scale.item() == 1.0
    assert int4.unpack_rows(packed, 128)[0, :6].tolist() == [7, -8, 2, 4, 0, 0]


def test_asymmetric_zero_points_of_zero_negative_positive_and_constant_groups() -> None:
    w = torch.zeros(8, 512, dtype=torch.bfloat16)
    w[0, 128:256] = -3.0  # all negative: lo = -3, hi = 0: scale 0.2, zero point -8 + 15 = 7
    w[0, 256:384] = 5.0  # all positive (constant): lo = 0, scale 1/3, zero point -8
    w[0, 384:512] = torch.linspace(-1, 2, 128)
    packed, scale, zero = int4.compressed_tensors_quantize(w, symmetric=False)
    assert zero is not None
    assert zero[0, :3].tolist() == [0, 7, -8]  # an all-zero group: zero point 0, scale eps
    assert scale[0, 0].item() == torch.finfo(torch.bfloat16).eps
    codes = int4.unpack_rows(packed, 512)
    assert torch.all(codes[0, 128:256] == -8) and torch.all(codes[0, 256:384] == 7)
    assert torch.all(codes[0, :128] == 0)


def test_the_kinds_and_their_recipes() -> None:
    from eaglequant.formats import get_format
    from eaglequant.formats.quant_config import QuantConfig
    from eaglequant.schemes.model import load_scheme

    fmt = get_format("compressed-tensors")
    for name, preset, zero_points in (("int4-w4a16", "W4A16", False), ("int4-w4a16-asym", "W4A16_ASYM", True)):
        scheme = load_scheme(name)
        kind = scheme.weight.kind
        assert scheme.activation is None and scheme.label == "W4A16" and fmt.algorithm(scheme) == preset
        recipe = fmt.recipe(scheme.kinds)
        assert recipe.zero_points == kind.zero_points == zero_points  # type: ignore[attr-defined]
        assert (kind.bits, kind.stored_dtype, kind.codes_per_element, kind.columns_per_scale) == (4, "I32", 8, 128)
        assert kind.rows_per_scale == (8 if zero_points else 1)  # eight rows share a packed word of zero points
        assert kind.shape_problem(60, 256, False) is not None and kind.shape_problem(64, 256, False) is None
        config = fmt.write_config(QuantConfig.flat(scheme.kinds)).quantization_config
        weights = config["config_groups"][preset]["weights"]
        assert (config["format"], weights["symmetric"], weights["zp_dtype"]) == (
            "pack-quantized",
            not zero_points,
            "torch.int8" if zero_points else None,
        )
        assert fmt.read_config(config, {}).kinds == scheme.kinds
        assert not any(get_format(other).supports(scheme) for other in ("quark", "modelopt", "fp8"))


def test_asymmetric_rows_start_on_a_packed_word() -> None:
    packed, scale, zero = int4.compressed_tensors_quantize(torch.randn(16, 128), symmetric=False)
    stored = StoredLinear(INT4_GROUP_ASYM, packed, block_scale=scale, zero_point=zero)
    assert torch.equal(stored.rows(slice(8, 16)).dequantize(), stored.dequantize()[8:16])
    with pytest.raises(ValueError, match="8-row"):
        stored.rows(slice(4, 16))


def test_a_written_head_is_read_by_its_kind_not_its_dtype(tmp_path) -> None:
    """I32 is packed INT4 here (8 values an element) and U8 packed FP4 (2): the declared kind says which."""
    from eaglequant import convert
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.readback.written_head import describe_written_head
    from tests.conftest import FIXTURES

    source = FIXTURES / "specforge-llama"
    with Checkpoint.open(source) as src:
        expected = {lin.module: (lin.out_features, lin.in_features) for lin in describe_head(src).linears}
    for scheme in ("int4-w4a16-asym", "mxfp4-w4a16", "int8"):
        convert(source, tmp_path / scheme, scheme=scheme, format="compressed-tensors")
        with Checkpoint.open(tmp_path / scheme) as written:
            head = describe_written_head(written)
        assert {lin.module: (lin.out_features, lin.in_features) for lin in head.linears} == expected, scheme


# -- the Triton kernel (interpreted on CPU), against the torch reference ------------------------------------------


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("shape", [(3, 80, 128), (16, 64, 256), (5, 40, 384)], ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_the_reference(shape: tuple[int, int, int], symmetric: bool) -> None:
    from eaglequant.kernels.reference import reference_linear

    triton_linear = triton_kernel()

    weight, x = gemm_case(shape)
    k = shape[2]
    packed, scale, zero = int4.compressed_tensors_quantize(weight, symmetric)
    stored = StoredLinear(
        INT4_GROUP if symmetric else INT4_GROUP_ASYM, packed, block_scale=scale.float(), zero_point=zero
    )
    expected = reference_linear(x, stored)
    got = triton_linear(x.to(DEVICE), stored.to(DEVICE)).cpu()
    assert (got - expected).abs().max() <= 2e-5 * expected.abs().max()
    eye = torch.eye(k, dtype=torch.bfloat16)
    assert torch.equal(triton_linear(eye.to(DEVICE), stored.to(DEVICE)).cpu().T, stored.dequantize())


@settings(max_examples=10, deadline=None)
@given(
    words=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=8 * 16, max_size=8 * 16),
    zero=st.lists(st.integers(-8, 7), min_size=8, max_size=8),
)
def test_any_stored_words_decode_like_the_reference(words: list[int], zero: list[int]) -> None:
    """Every nibble of every int32 (sign bit included), with and without zero points."""
    triton_linear = triton_kernel()

    packed = torch.tensor(words, dtype=torch.int32).reshape(8, 16)
    scale = torch.linspace(0.01, 2.0, 8).reshape(8, 1)
    eye = torch.eye(128, dtype=torch.bfloat16)
    for stored in (
        StoredLinear(INT4_GROUP, packed, block_scale=scale),
        StoredLinear(
            INT4_GROUP_ASYM, packed, block_scale=scale, zero_point=torch.tensor(zero, dtype=torch.int8)[:, None]
        ),
    ):
        assert torch.equal(triton_linear(eye, stored).T, stored.dequantize())


# -- engine-load cells -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("scheme", ["int4-w4a16", "int4-w4a16-asym"])
def test_every_loading_cell_is_an_engine_load_case(engine: str, scheme: str) -> None:
    """The engine-load tests build their cases from the matrix: each INT4 cell that loads is loaded on a Llama and an
    MLA fixture by the engine's own code (tests/engine_load/test_engine_load.py)."""
    from eaglequant.engines import ENGINES
    from eaglequant.engines.support import support
    from eaglequant.schemes.model import load_scheme
    from tests.engine_load.test_engine_load import matrix_cases

    cell = support(load_scheme(scheme).kinds, "compressed-tensors", ENGINES[engine])
    assert cell is not None and cell.loads
    cases = [c for c in matrix_cases(engine) if c.scheme == scheme]
    assert {c.fixture for c in cases if c.loads} >= {"specforge-llama", "torchspec-mla"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engines_refuse_int4_where_the_base_qkv_holds_partial_groups(engine: str) -> None:
    """Both Llama drafts first build a qkv_proj for the hidden size, and CompressedTensorsWNA16 refuses in-features
    that are not whole groups of 128 (the fixture's hidden size is 64); block FP8 checks that only under TP."""
    from eaglequant import inspect
    from eaglequant.common.errors import InputError
    from eaglequant.engines import ENGINES
    from eaglequant.formats import get_format
    from eaglequant.kinds import KindPair
    from tests.conftest import FIXTURES

    with pytest.raises(InputError, match="nothing would be quantized"):
        inspect(FIXTURES / "awkward-fp32", scheme="int4-w4a16", format="compressed-tensors", engines=[engine])
    head, ct = inspect(FIXTURES / "awkward-fp32").head, get_format("compressed-tensors")
    qkv = next(m for m in ENGINES[engine].runtime_modules(head, 61) if "qkv_proj" in m.names[0])
    refusal = ENGINES[engine].decide(qkv, ct, KindPair("int4-group-asym", None))
    assert refusal.outcome == "refused" and "create_weights" in refusal.why
    assert "create_weights" not in ENGINES[engine].decide(qkv, ct, KindPair("fp8-block", "fp8-group")).why
    wide = inspect(FIXTURES / "specforge-llama").head  # hidden size 128
    qkv = next(m for m in ENGINES[engine].runtime_modules(wide, 61) if "qkv_proj" in m.names[0])
    assert ENGINES[engine].decide(qkv, ct, KindPair("int4-group", None)).quantized


def _reverse_nibbles(tensors: dict) -> None:  # type: ignore[type-arg]
    """Element 8j + i read from nibble 7 - i: the packing order of a wrong implementation."""
    packed = tensors["midlayer.mlp.up_proj.weight_packed"]
    nibbles = [(packed >> (4 * i)) & 15 for i in range(8)]
    reversed_words = sum(nibble << (4 * (7 - i)) for i, nibble in enumerate(nibbles))
    tensors["midlayer.mlp.up_proj.weight_packed"] = reversed_words.to(torch.int32)


def _shift_zero_points(tensors: dict) -> None:  # type: ignore[type-arg]
    """Every zero point of one linear moved by one step (each nibble + 1, wrapping within 0..15)."""
    packed = tensors["midlayer.self_attn.o_proj.weight_zero_point"]
    shifted = sum((((packed >> (4 * i)) & 15) + 1) % 16 << (4 * i) for i in range(8))
    tensors["midlayer.self_attn.o_proj.weight_zero_point"] = shifted.to(torch.int32)


def _double_one_int8_row(tensors: dict) -> None:  # type: ignore[type-arg]
    tensors["midlayer.mlp.down_proj.weight_scale"][5] *= 2


@pytest.mark.parametrize(
    ("scheme", "damage", "where"),
    [
        ("int4-w4a16", _reverse_nibbles, "up_proj"),
        ("int4-w4a16-asym", _shift_zero_points, "o_proj"),
        ("int8", _double_one_int8_row, "down_proj"),
    ],
    ids=["nibble-order", "zero-points", "int8-row-scale"],
)
def test_verify_fails_a_planted_fault(tmp_path, scheme: str, damage, where: str) -> None:  # type: ignore[no-untyped-def]
    """verify reads the integer kinds through their kind objects: a wrong packing order, shifted zero points or one
    row's scale fail the linear they sit in, by the numbers (the file hashes are re-recorded)."""
    import hashlib
    import json

    from safetensors.torch import load_file, save_file

    from eaglequant import convert, verify
    from eaglequant.common.findings import codes
    from tests.conftest import FIXTURES

    source = FIXTURES / "specforge-llama"
    dst = convert(source, tmp_path / scheme, scheme=scheme, format="compressed-tensors").destination
    path = dst / "model.safetensors"
    tensors = load_file(path)
    damage(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    report_path = dst / "eaglequant_report.json"
    report = json.loads(report_path.read_text())
    for name in report["files"]:
        report["files"][name] = hashlib.sha256((dst / name).read_bytes()).hexdigest()
    report_path.write_text(json.dumps(report))
    result = verify(dst, source=source)
    assert result.verdict == "failed"
    assert any(where in found.subject for found in result.problems), result.problems
    assert "sha256-differs" not in codes(result.problems)
