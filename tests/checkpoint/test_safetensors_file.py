"""eaglequant's safetensors writer and strict header parser agree with the reference library, and the
parser fails only with :class:`CheckpointError` whatever bytes it is given."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eaglequant.checkpoint.dtypes import ITEMSIZE, from_torch, to_torch
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.checkpoint.safetensors_file import read_bytes, read_header
from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec, safetensors_header
from eaglequant.common.errors import CheckpointError


def _torch_dtype(name: str) -> torch.dtype | None:
    try:
        return to_torch(name)
    except AttributeError:  # a torch without this dtype
        return None


DTYPES = [d for d in ITEMSIZE if _torch_dtype(d) is not None]
SHAPES = [(3, 5), (7,), (), (0,), (2, 0, 3), (1, 1, 1, 2)]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_every_itemsize_dtype_is_covered() -> None:
    # The tensors below must exercise the dtypes the brief names, not just whatever torch happens to have.
    assert {"F8_E4M3", "F8_E8M0", "BOOL", "U16", "U32", "U64", "BF16"} <= set(DTYPES)


def make_tensor(dtype: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Arbitrary bit patterns (NaNs, subnormals, ...) for every dtype; 0/1 for bool."""
    gen = torch.Generator().manual_seed(seed)
    tdtype = to_torch(dtype)
    if tdtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    raw = torch.randint(0, 256, (math.prod(shape) * ITEMSIZE[dtype],), generator=gen, dtype=torch.uint8)
    return raw.view(tdtype).reshape(shape)


def raw_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())


def sample_tensors() -> dict[str, torch.Tensor]:
    tensors = {}
    for i, dtype in enumerate(DTYPES):
        for j, shape in enumerate(SHAPES):
            tensors[f"t{i:02d}.{dtype.lower()}.{j}"] = make_tensor(dtype, shape, seed=100 * i + j)
    return tensors


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Identical dtype, shape and bytes (bitwise: NaN payloads and -0.0 included)."""
    assert actual.dtype == expected.dtype
    assert tuple(actual.shape) == tuple(expected.shape)
    assert raw_bytes(actual) == raw_bytes(expected)


def write_with_eaglequant(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None) -> None:
    specs = [TensorSpec(name, from_torch(t.dtype), tuple(t.shape)) for name, t in tensors.items()]
    shard = SafetensorsShard(path, specs, metadata=metadata)
    for name, tensor in reversed(tensors.items()):  # positioned writes: any order gives the same file
        shard.write(name, 0, raw_bytes(tensor))
    assert shard.close() == hashlib.sha256(path.read_bytes()).hexdigest()


# -- (a) eaglequant's writer -> both readers -------------------------------------------------------


def test_stream_writer_round_trips_through_both_readers(tmp_path: Path) -> None:
    tensors = sample_tensors()
    path = tmp_path / "model.safetensors"
    write_with_eaglequant(path, tensors, {"format": "pt"})

    loaded = load_file(path)
    assert set(loaded) == set(tensors)
    for name, expected in tensors.items():
        assert_same(loaded[name], expected)
    with safe_open(path, framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}

    header = read_header(path)
    assert header.metadata == {"format": "pt"}
    assert header.data_start % 8 == 0
    assert list(header.tensors) == list(tensors)  # the writer keeps the planned order
    for name, expected in tensors.items():
        info = header.tensors[name]
        assert (info.dtype, info.shape, info.nbytes) == (
            from_torch(expected.dtype),
            tuple(expected.shape),
            expected.numel() * expected.element_size(),
        )
        assert bytes(read_bytes(info)) == raw_bytes(expected)

    (tmp_path / "config.json").write_text("{}")
    with Checkpoint.open(tmp_path) as checkpoint:
        assert checkpoint.source_format == "safetensors"
        assert set(checkpoint.tensors) == set(tensors)
        for name, expected in tensors.items():
            assert_same(checkpoint.read(name), expected)


def test_stream_writer_without_metadata_and_without_tensors(tmp_path: Path) -> None:
    path = tmp_path / "empty.safetensors"
    write_with_eaglequant(path, {}, None)
    assert load_file(path) == {}
    header = read_header(path)
    assert header.tensors == {} and header.metadata is None and header.data_start == header.file_size


# -- (b) the reference writer -> eaglequant's reader -----------------------------------------------


def test_reference_files_parse_the_same(tmp_path: Path) -> None:
    tensors = sample_tensors()
    path = tmp_path / "model.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "written by safetensors"})

    header = read_header(path)
    assert header.metadata == {"format": "pt", "note": "written by safetensors"}
    with safe_open(path, framework="pt") as handle:
        stored = list(handle.keys())
        reference = {name: (handle.get_slice(name).get_dtype(), handle.get_slice(name).get_shape()) for name in stored}
    assert {n: (i.dtype, list(i.shape)) for n, i in header.tensors.items()} == reference
    for name, expected in tensors.items():
        assert header.tensors[name].dtype == from_torch(expected.dtype)
        assert header.tensors[name].shape == tuple(expected.shape)
        assert bytes(read_bytes(header.tensors[name])) == raw_bytes(expected)

    (tmp_path / "config.json").write_text("{}")
    with Checkpoint.open(tmp_path) as checkpoint:
        for name, expected in tensors.items():
            assert_same(checkpoint.read(name), expected)


# -- (c) property: safetensors_header builds headers both parsers accept ---------------------------

names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12).filter(lambda n: n != "__metadata__")
specs_strategy = st.lists(
    st.tuples(names, st.sampled_from(DTYPES), st.lists(st.integers(0, 4), max_size=3).map(tuple)),
    max_size=8,
    unique_by=lambda spec: spec[0],
)
metadata_strategy = st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)


@FUZZ
@given(specs=specs_strategy, metadata=metadata_strategy)
def test_built_headers_parse_back(
    tmp_path: Path, specs: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None
) -> None:
    tensor_specs = [TensorSpec(*spec) for spec in specs]
    header = safetensors_header(tensor_specs, metadata)
    assert len(header) % 8 == 0
    data_size = sum(s.nbytes for s in tensor_specs)
    path = tmp_path / "built.safetensors"
    path.write_bytes(header + bytes(i % 251 for i in range(data_size)))

    parsed = read_header(path)
    assert parsed.data_start == len(header)
    assert parsed.metadata == (metadata or None)
    assert [(i.name, i.dtype, i.shape) for i in parsed.tensors.values()] == specs
    offset = parsed.data_start
    for spec in tensor_specs:  # laid out back to back, in order
        assert parsed.tensors[spec.name].offset == offset
        assert parsed.tensors[spec.name].nbytes == spec.nbytes
        offset += spec.nbytes
    assert offset == parsed.file_size

    with safe_open(path, framework="pt") as handle:
        assert set(handle.keys()) == {s.name for s in tensor_specs}
        for spec in tensor_specs:
            piece = handle.get_slice(spec.name)
            assert (piece.get_dtype(), tuple(piece.get_shape())) == (spec.dtype, spec.shape)
        assert (handle.metadata() or None) == (metadata or None)


# -- (d) fuzz: read_header raises CheckpointError or nothing ---------------------------------------


def valid_small_file() -> bytes:
    specs = [TensorSpec("a.weight", "BF16", (2, 3)), TensorSpec("b", "F8_E4M3", (0,)), TensorSpec("c", "I64", (2,))]
    return safetensors_header(specs, {"format": "pt"}) + bytes(range(28))


VALID = valid_small_file()
HEADER_END = 8 + struct.unpack("<Q", VALID[:8])[0]

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_keys = st.text(max_size=6)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=4),
    max_leaves=12,
)
entries = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from(sorted(ITEMSIZE)) | json_values,
        "shape": st.lists(st.integers(-2, 5), max_size=3) | json_values,
        "data_offsets": st.lists(st.integers(-2, 40), min_size=0, max_size=3) | json_values,
        "extra": json_values,
    },
)
headers = st.dictionaries(
    st.sampled_from(["a.weight", "b", "c", "__metadata__"]) | st.text(max_size=6),
    entries | json_values,
    max_size=4,
)


def _check_parse(path: Path, blob: bytes) -> None:
    path.write_bytes(blob)
    try:
        read_header(path)
    except CheckpointError as exc:
        assert str(exc) and "\n" not in str(exc)


def _framed(raw: bytes, data: bytes, pad: bool) -> bytes:
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def test_valid_small_file_is_valid(tmp_path: Path) -> None:
    (tmp_path / "v.safetensors").write_bytes(VALID)
    assert set(read_header(tmp_path / "v.safetensors").tensors) == {"a.weight", "b", "c"}


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 7)), min_size=1, max_size=8),
    header_only=st.booleans(),
)
def test_fuzz_bit_flips(tmp_path: Path, flips: list[tuple[int, int]], header_only: bool) -> None:
    blob = bytearray(VALID)
    for position, bit in flips:
        blob[position % HEADER_END if header_only else position] ^= 1 << bit
    _check_parse(tmp_path / "f.safetensors", bytes(blob))


@FUZZ
@given(cut=st.integers(0, len(VALID)), tail=st.binary(max_size=16))
@example(cut=0, tail=b"")
@example(cut=7, tail=b"")
@example(cut=HEADER_END, tail=b"")
@example(cut=len(VALID), tail=b"\0")
def test_fuzz_truncation_and_trailing_bytes(tmp_path: Path, cut: int, tail: bytes) -> None:
    _check_parse(tmp_path / "t.safetensors", VALID[:cut] + tail)


@FUZZ
@given(header=headers | json_values, data=st.binary(max_size=48), pad=st.booleans(), ascii_only=st.booleans())
def test_fuzz_random_header_json(tmp_path: Path, header: Any, data: bytes, pad: bool, ascii_only: bool) -> None:
    raw = json.dumps(header, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    _check_parse(tmp_path / "j.safetensors", _framed(raw, data, pad))


@FUZZ
@given(raw=st.binary(max_size=64), length_delta=st.integers(-8, 8), data=st.binary(max_size=16))
def test_fuzz_random_header_bytes(tmp_path: Path, raw: bytes, length_delta: int, data: bytes) -> None:
    blob = struct.pack("<Q", max(0, len(raw) + length_delta)) + raw + data
    _check_parse(tmp_path / "b.safetensors", blob)


# -- headers the fuzzers above found: each is refused as a CheckpointError, never another exception ----------


def _header_file(tmp_path: Path, raw: bytes, data: bytes = b"\0" * 4) -> Path:
    path = tmp_path / "bug.safetensors"
    path.write_bytes(_framed(raw, data, pad=True))
    return path


@pytest.mark.parametrize("dtype", [["F32"], {"F32": 1}])
def test_unhashable_dtype_is_a_checkpoint_error(tmp_path: Path, dtype: Any) -> None:
    raw = json.dumps({"a": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(CheckpointError, match="'a'"):
        read_header(_header_file(tmp_path, raw))


def test_deeply_nested_header_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        read_header(_header_file(tmp_path, b"[" * 100_000))


def test_overlong_integer_is_a_checkpoint_error(tmp_path: Path) -> None:
    raw = b'{"a":{"dtype":"F32","shape":[' + b"1" * 5000 + b'],"data_offsets":[0,4]}}'
    with pytest.raises(CheckpointError):
        read_header(_header_file(tmp_path, raw))
