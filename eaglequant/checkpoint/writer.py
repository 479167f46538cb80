"""Writing checkpoints: streamed safetensors shards and an output directory that appears atomically.

A shard's header is computed from the planned tensor list (names, dtypes, shapes) before any data
exists, so tensors can be appended one at a time: memory never holds a whole shard.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from eaglequant.checkpoint.dtypes import ITEMSIZE
from eaglequant.errors import OutputError

TMP_MARKER = ".eaglequant-tmp-"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as it will be written: its name, safetensors dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZE[self.dtype]


def safetensors_header(specs: list[TensorSpec], metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length plus JSON header for tensors laid out in ``specs`` order."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for spec in specs:
        header[spec.name] = {
            "dtype": spec.dtype,
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment with spaces
    return len(raw).to_bytes(8, "little") + raw


class HashingFile:
    """A write-only file that keeps the SHA-256 of everything written, so no second read is needed."""

    def __init__(self, path: Path) -> None:
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._sha.update(data)
        self.size += len(data)
        return self._file.write(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def close(self, sync: bool = True) -> None:
        if sync:
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()


class SafetensorsStreamWriter:
    """Writes the header up front, then accepts each tensor's bytes in the planned order."""

    def __init__(self, path: Path, specs: list[TensorSpec], metadata: dict[str, str] | None = None) -> None:
        self.path = path
        self.specs = specs
        self._next = 0
        self._handle = HashingFile(path)
        self._handle.write(safetensors_header(specs, metadata))

    @property
    def handle(self) -> HashingFile:
        return self._handle

    @property
    def sha256(self) -> str:
        return self._handle.hexdigest()

    def expect(self, name: str) -> TensorSpec:
        """The spec of the next tensor, which must be ``name``."""
        spec = self.specs[self._next]
        if spec.name != name:
            raise RuntimeError(f"writer expected {spec.name!r} next, got {name!r}")
        return spec

    def write(self, name: str, data: bytes | bytearray | memoryview) -> None:
        spec = self.expect(name)
        if len(data) != spec.nbytes:
            raise RuntimeError(f"{name!r}: planned {spec.nbytes} bytes, got {len(data)}")
        self._handle.write(data)
        self._next += 1

    def mark_copied(self, name: str, nbytes: int) -> None:
        """Record that ``name`` was written directly through :attr:`handle` (a chunked copy)."""
        spec = self.expect(name)
        if nbytes != spec.nbytes:
            raise RuntimeError(f"{name!r}: planned {spec.nbytes} bytes, copied {nbytes}")
        self._next += 1

    def close(self) -> None:
        if self._next != len(self.specs):
            self._handle.close(sync=False)
            raise RuntimeError(f"{self.path.name}: {len(self.specs) - self._next} planned tensors never written")
        self._handle.close()


def shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def split_into_shards(specs: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Greedy, order-preserving split; a tensor larger than the limit gets a shard of its own."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return shards


def check_destination(src: Path, dst: Path, overwrite: bool) -> None:
    src_real, dst_real = src.resolve(), dst.resolve()
    if dst_real == src_real or src_real in dst_real.parents:
        raise OutputError(f"{dst}: the destination is inside the source checkpoint {src}", hint="choose another DST")
    if dst_real in src_real.parents:
        raise OutputError(f"{dst}: the destination contains the source checkpoint {src}", hint="choose another DST")
    if dst.exists() and not overwrite:
        raise OutputError(f"{dst}: already exists", hint="pass --overwrite to replace it, or choose another DST")
    if dst.exists() and not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a directory")


def remove_stale_temporaries(dst: Path) -> list[Path]:
    """Remove temporary directories that an interrupted run left beside ``dst`` (their owner is gone)."""
    removed: list[Path] = []
    parent = dst.parent if dst.parent.exists() else None
    if parent is None:
        return removed
    for candidate in parent.glob(f".{dst.name}{TMP_MARKER}*"):
        pid_text = candidate.name.rsplit("-", 2)[-2] if candidate.name.count("-") >= 2 else ""
        if pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(candidate, ignore_errors=True)
        removed.append(candidate)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def atomic_directory(dst: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary directory beside ``dst``; on success it replaces ``dst`` in one rename.

    On any exception (including KeyboardInterrupt) the temporary directory is removed and ``dst``
    is left exactly as it was.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(dst)
    tmp = dst.parent / f".{dst.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"{dst.parent}: cannot create the output directory ({exc.strerror})") from exc
    try:
        yield tmp
        _fsync_dir(tmp)
        if dst.exists():
            if not overwrite:
                raise OutputError(f"{dst}: appeared while converting", hint="pass --overwrite to replace it")
            trash = dst.parent / f".{dst.name}{TMP_MARKER}{os.getpid()}-old"
            dst.rename(trash)
            tmp.rename(dst)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            tmp.rename(dst)
        _fsync_dir(dst.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
