"""Reading and validating safetensors headers without loading any tensor data.

The header is parsed in pure Python (no torch), so ``inspect`` stays cheap and every shard can be
validated before the long work starts. Validation follows the format's rules strictly: the data
region must be covered exactly, without gaps or overlaps, by tensors whose byte length equals
dtype size x number of elements.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.dtypes import ITEMSIZE
from eaglequant.common.errors import CheckpointError

# A real header is a few hundred KB at most; anything larger is refused before it is read.
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: enough to read or copy it without touching any other tensor."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    offset: int  # absolute byte offset of the data in ``file``; -1 for pickled (.bin) sources
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] | None
    data_start: int
    file_size: int


def _refuse(path: Path, what: str, hint: str = "the file is corrupt or truncated; re-download it") -> None:
    raise CheckpointError(f"{path}: {what}", hint=hint)


def _no_duplicate_keys(path: Path) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                _refuse(path, f"header names tensor {key!r} twice")
            seen[key] = value
        return seen

    return hook


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and validate the header of ``path``. Raises :class:`CheckpointError` on any defect."""
    try:
        file_size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                _refuse(path, f"only {file_size} bytes, too short to hold a safetensors header")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER_BYTES:
                _refuse(path, f"header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit")
            if 8 + header_len > file_size:
                _refuse(path, f"header length {header_len} runs past the end of the {file_size}-byte file")
            raw = handle.read(header_len)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys(path))
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: header is not UTF-8", hint="the file is not safetensors") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{path}: header is not valid JSON ({exc.msg} at byte {exc.pos})",
            hint="the file is corrupt or not safetensors",
        ) from exc
    except (ValueError, RecursionError) as exc:  # e.g. integers over 4300 digits, absurd nesting
        raise CheckpointError(f"{path}: header JSON cannot be parsed ({type(exc).__name__})") from exc
    if not isinstance(header, dict):
        _refuse(path, "header is not a JSON object")
    data_start = 8 + header_len
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        _refuse(path, "__metadata__ must map strings to strings")
    tensors = {name: _tensor_info(path, name, entry, data_start) for name, entry in header.items()}
    _check_coverage(path, tensors, data_start, file_size)
    return SafetensorsHeader(path, tensors, metadata, data_start, file_size)


def _tensor_info(path: Path, name: str, entry: Any, data_start: int) -> TensorInfo:
    if not isinstance(entry, dict):
        _refuse(path, f"header entry for {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        _refuse(path, f"tensor {name!r} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        _refuse(path, f"tensor {name!r} has an invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[1] < offsets[0]
    ):
        _refuse(path, f"tensor {name!r} has invalid data_offsets {offsets!r}")
    nbytes = math.prod(shape) * ITEMSIZE[dtype]
    if offsets[1] - offsets[0] != nbytes:
        _refuse(
            path,
            f"tensor {name!r}: {dtype} {shape} needs {nbytes} bytes but data_offsets span {offsets[1] - offsets[0]}",
        )
    return TensorInfo(name, dtype, tuple(shape), path, data_start + offsets[0], nbytes)


def _check_coverage(path: Path, tensors: dict[str, TensorInfo], data_start: int, file_size: int) -> None:
    """The data region must be tiled exactly by the tensors: no gap, no overlap, nothing past the end."""
    data_size = file_size - data_start
    ordered = sorted(tensors.values(), key=lambda t: (t.offset, t.nbytes))
    for info in ordered:  # first: a tensor sent past the end is named, not the gap it leaves behind
        begin = info.offset - data_start
        if begin + info.nbytes > data_size:
            _refuse(
                path,
                f"tensor {info.name!r} has data_offsets [{begin}, {begin + info.nbytes}] past the end of the "
                f"{data_size} bytes after the header",
            )
    cursor = 0
    for info in ordered:
        begin = info.offset - data_start
        if begin != cursor:
            kind = "overlaps the previous tensor" if begin < cursor else f"leaves a gap of {begin - cursor} bytes"
            _refuse(path, f"tensor {info.name!r} {kind}")
        cursor = begin + info.nbytes
    if cursor < data_size:
        _refuse(path, f"{data_size - cursor} trailing bytes after the last tensor")


def read_bytes(info: TensorInfo, handle: int | None = None) -> bytearray:
    """Read one tensor's bytes with positioned reads (no mmap: page cache does not count as our RSS)."""
    buf = bytearray(info.nbytes)
    fd = handle if handle is not None else os.open(info.file, os.O_RDONLY)
    try:
        if not read_exactly(fd, memoryview(buf), info.offset):
            raise CheckpointError(f"{info.file}: unexpected end of file while reading {info.name!r}")
    finally:
        if handle is None:
            os.close(fd)
    return buf


def read_exactly(fd: int, view: memoryview, offset: int) -> bool:
    """Fill ``view`` from ``fd`` at ``offset`` with positioned reads; False when the file ends first."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            return False
        done += n
    return True
