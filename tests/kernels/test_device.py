"""``--device cuda``: the quantization math on a GPU writes the same bytes as on the CPU.

The GPU tests run only where torch sees a CUDA device (never in CPU-only CI, where they skip); the
refusal of a missing GPU is tested everywhere else.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.bench.heads import kimi_llama_scaled, kimi_mla, write_head
from eaglequant.common.errors import InputError
from eaglequant.conversion.devices import quantization_device
from eaglequant.formats import stored_cells
from eaglequant.numerics import fp8, mxfp4, nvfp4
from eaglequant.numerics.fp4 import E2M1_MAGNITUDES
from tests.conftest import FIXTURE_NAMES, FIXTURES, NOTHING_TO_QUANTIZE, TARGET_LAYERS, run_cli, stores_something

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


@pytest.mark.parametrize("name", ["tpu", "cpu:0", "cuda:x", ""])
def test_unknown_device_is_bad_input(name: str) -> None:
    with pytest.raises(InputError, match="not one eaglequant runs on"):
        quantization_device(name)


def test_cpu_needs_no_copies() -> None:
    assert quantization_device("cpu") is None


@without_cuda
def test_missing_gpu_is_one_clear_line(tmp_path: Path) -> None:
    done = run_cli("convert", str(FIXTURES / "specforge-llama"), str(tmp_path / "out"), "--device", "cuda")
    assert done.exit_code == 2
    assert "sees no CUDA GPU" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def _digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.glob("*.safetensors"))}


@needs_cuda
@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_cuda_writes_the_cpu_bytes(fixture: str, tmp_path: Path) -> None:
    from eaglequant import convert

    for scheme, format_name in stored_cells():
        if not stores_something(fixture, scheme, format_name):
            continue
        options = {"scheme": scheme, "format": format_name, "target_layers": TARGET_LAYERS}
        on_cpu = convert(FIXTURES / fixture, tmp_path / f"{scheme}-{format_name}-cpu", **options)
        on_gpu = convert(FIXTURES / fixture, tmp_path / f"{scheme}-{format_name}-cuda", device="cuda", **options)
        assert _digests(on_gpu.destination) == _digests(on_cpu.destination), (scheme, format_name)
        for cpu_linear, gpu_linear in zip(on_cpu.linears, on_gpu.linears, strict=True):
            assert gpu_linear.relative_error == pytest.approx(cpu_linear.relative_error, rel=1e-4)


# The Kimi-K2.5 heads' layouts at an eighth of every dimension (90 and 75 MB of bf16): the shapes the fixtures lack
# (fused q/k/v of 8 heads, 128-column groups, an MLA attention), in seconds.
SCALED_HEADS = {"kimi-llama-div8": lambda: kimi_llama_scaled(8), "kimi-mla-div8": lambda: kimi_mla(8)}


@pytest.fixture(scope="module")
def scaled_heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    written = {}
    for name, head in SCALED_HEADS.items():
        written[name] = tmp_path_factory.mktemp(name)
        write_head(head(), written[name])
    return written


@needs_cuda
@pytest.mark.parametrize("cell", list(stored_cells()), ids="-".join)
@pytest.mark.parametrize("head", list(SCALED_HEADS))
def test_cuda_writes_the_cpu_bytes_of_a_scaled_kimi_head(
    head: str, cell: tuple[str, str], scaled_heads: dict[str, Path], tmp_path: Path
) -> None:
    from eaglequant import convert

    scheme, format_name = cell
    options = {"scheme": scheme, "format": format_name, "target_layers": TARGET_LAYERS}
    try:
        on_cpu = convert(scaled_heads[head], tmp_path / "cpu", **options)
    except InputError as exc:
        if NOTHING_TO_QUANTIZE in str(exc):
            pytest.skip(f"{scheme} in {format_name} quantizes no linear of {head}")
        raise
    on_gpu = convert(scaled_heads[head], tmp_path / "cuda", device="cuda", **options)
    assert _digests(on_gpu.destination) == _digests(on_cpu.destination)


# Values that sit on every rounding decision: E2M1 midpoints and grid points at several block scales,
# FP8 ties, subnormals, zeros, and the largest finite values of each dtype.
_EDGES = [m * s for m in (*E2M1_MAGNITUDES, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0) for s in (1.0, 2.0**-8, 2.0**7)]
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _weights(values: list[float], dtype: torch.dtype, rows: int) -> torch.Tensor:
    flat = torch.tensor(values, dtype=torch.float64)
    columns = 64
    tiled = flat.repeat((rows * columns) // len(flat) + 1)[: rows * columns]
    return tiled.reshape(rows, columns).to(dtype)


_FLAVOURS = {
    "fp8 quark": fp8.quark_per_channel,
    "fp8 compressed-tensors": fp8.compressed_tensors_per_channel,
    "fp8 modelopt": fp8.modelopt_per_channel,
    "mxfp4 quark": mxfp4.quark_quantize,
    "mxfp4 compressed-tensors": mxfp4.compressed_tensors_quantize,
    "nvfp4 modelopt": lambda w: nvfp4.modelopt_quantize(w, nvfp4.modelopt_global_scale(w.abs().max().float())),
    "nvfp4 compressed-tensors": lambda w: nvfp4.compressed_tensors_quantize(
        w, nvfp4.compressed_tensors_global_scale(w.abs().max().float(), w.dtype)
    ),
}


@needs_cuda
@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.sampled_from(_EDGES), st.floats(-1e3, 1e3, allow_nan=False, width=32)).map(
            lambda v: v * (-1 if v > 10 else 1)
        ),
        min_size=1,
        max_size=96,
    ),
    dtype=st.sampled_from(_DTYPES),
    rows=st.integers(1, 5),
)
def test_every_flavour_rounds_alike_on_both_devices(values: list[float], dtype: torch.dtype, rows: int) -> None:
    weight = _weights(values, dtype, rows)
    for name, quantize in _FLAVOURS.items():
        on_cpu = quantize(weight)
        on_gpu = quantize(weight.cuda())
        for expected, got in zip(on_cpu, on_gpu, strict=True):
            assert got.device.type == "cuda", name
            assert torch.equal(got.cpu().view(torch.uint8), expected.view(torch.uint8)), name
