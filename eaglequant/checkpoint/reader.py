"""Opening an EAGLE-3 checkpoint directory: config, weight files, and tensors read one at a time.

Supported sources: ``model.safetensors``; shards listed by ``model.safetensors.index.json``; a single
unindexed ``*.safetensors``; ``pytorch_model.bin`` (or shards listed by ``pytorch_model.bin.index.json``),
unpickled only with ``torch.load(weights_only=True)``.

Memory: ``read`` materialises one tensor, ``read_rows`` a block of its rows; ``copy_into`` copies bytes
from file to file without holding them.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eaglequant.checkpoint.dtypes import from_torch, to_torch
from eaglequant.checkpoint.safetensors_file import TensorInfo, read_bytes, read_header
from eaglequant.common.errors import CheckpointError, InputError

if TYPE_CHECKING:
    import torch

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
SKIPPED_DIRS = {".git", ".cache", ".huggingface", ".eaglequant"}  # bookkeeping, never part of a checkpoint

# What torch.load raises for a file that is not a checkpoint it can read: a pickle it refuses or cannot parse, a zip it
# cannot open or a truncated one (RuntimeError), a bad header (ValueError), a short or unreadable file (EOFError,
# OSError, which covers a .gz that is not gzip).
TORCH_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    pickle.UnpicklingError,
    RuntimeError,
    ValueError,
    OSError,
    EOFError,
)


class ByteTarget(Protocol):
    """Where tensor bytes go (a :class:`~eaglequant.checkpoint.writer.SafetensorsShard`)."""

    def write(self, name: str, start: int, data: bytes | bytearray | memoryview) -> None: ...

    def copy_from(self, name: str, start: int, src_fd: int, src_offset: int, nbytes: int) -> None: ...


def load_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{path}: {what} is missing") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({exc})") from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: {what} is not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: {what} cannot be parsed ({type(exc).__name__})") from exc
    if not isinstance(value, dict):
        raise InputError(f"{path}: {what} must be a JSON object")
    return value


def resolve_inside(root: Path, relative: str, what: str) -> Path:
    """Resolve ``relative`` under ``root``, refusing absolute paths, ``..`` and symlinks that leave ``root``."""
    if "\0" in relative:
        raise CheckpointError(f"{root}: {what} names {relative!r}, which is not a valid file name")
    if not relative or os.path.isabs(relative) or ".." in Path(relative).parts:
        raise CheckpointError(f"{root}: {what} names {relative!r}, a path outside the checkpoint directory")
    path = root / relative
    try:
        real = path.resolve()
    except RuntimeError as exc:  # a symlink loop (Python < 3.13 raises this even when not strict)
        raise CheckpointError(f"{path}: is a symlink loop") from exc
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be resolved ({exc.strerror})") from exc
    if not _within(real, root.resolve()) and not _within_hf_cache_blobs(real, root):
        raise CheckpointError(f"{path}: is a symlink leading outside the checkpoint directory ({real})")
    return path


def source_files(root: Path) -> list[Path]:
    """Every regular file of the checkpoint directory ``root`` that a conversion may read or carry over
    (bookkeeping directories left out)."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(root).parts)
    )


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _within_hf_cache_blobs(real: Path, root: Path) -> bool:
    """Hub cache snapshots are symlinks into ``<repo>/blobs``; that one escape is legitimate."""
    resolved_root = root.resolve()
    if resolved_root.parent.name != "snapshots":
        return False
    repo = resolved_root.parent.parent
    return repo.name.startswith(("models--", "datasets--")) and _within(real, repo / "blobs")


@dataclass
class Checkpoint:
    """An opened checkpoint: every tensor's location known, no tensor data loaded yet."""

    root: Path
    config: dict[str, Any]
    source_format: str  # "safetensors" | "safetensors-sharded" | "pytorch-bin"
    weight_files: list[Path]
    tensors: dict[str, TensorInfo]
    metadata_files: list[str] = field(default_factory=list)  # files that describe weights (indexes)
    _bin_state: dict[str, Any] = field(default_factory=dict, repr=False)
    _fds: dict[Path, int] = field(default_factory=dict, repr=False)
    _fds_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, root: str | Path, role: str = "SRC") -> Checkpoint:
        """``role``: what the directory is to the caller (SRC, DST), for messages."""
        root = Path(root)
        if not root.is_dir():
            what = "a quantized checkpoint directory" if role == "DST" else "a checkpoint directory"
            problem = "not a directory" if root.exists() else "does not exist"
            raise InputError(f"{root}: {problem}", hint=f"{role} must be {what}")
        if not (root / "config.json").exists() and not (root / "config.json").is_symlink():
            raise InputError(
                f"{root}: config.json is missing",
                hint=f"{role} must be a Hugging Face checkpoint directory: config.json beside the weights",
            )
        config = load_json_object(resolve_inside(root, "config.json", role), "config.json")
        if (root / SAFETENSORS_INDEX).exists():
            return cls._open_indexed(root, config, SAFETENSORS_INDEX, "safetensors-sharded")
        if (root / "model.safetensors").exists():
            return cls._open_safetensors(root, config, [resolve_inside(root, "model.safetensors", "SRC")])
        loose = sorted(p.name for p in root.glob("*.safetensors"))
        if len(loose) == 1:
            return cls._open_safetensors(root, config, [resolve_inside(root, loose[0], "SRC")])
        if len(loose) > 1:
            raise CheckpointError(
                f"{root}: {len(loose)} .safetensors files but no {SAFETENSORS_INDEX}",
                hint="add the index that maps tensors to shards",
            )
        if (root / BIN_INDEX).exists():
            return cls._open_indexed(root, config, BIN_INDEX, "pytorch-bin")
        if (root / "pytorch_model.bin").exists():
            return cls._open_bin(root, config, [resolve_inside(root, "pytorch_model.bin", "SRC")], [])
        raise InputError(
            f"{root}: no weights found",
            hint="expected model.safetensors, model.safetensors.index.json or pytorch_model.bin",
        )

    @classmethod
    def open_file(cls, path: str | Path) -> Checkpoint:
        """One standalone safetensors file (no config.json), e.g. calibration data."""
        path = Path(path)
        return cls._open_safetensors(path.parent, {}, [path])

    @classmethod
    def _open_safetensors(
        cls,
        root: Path,
        config: dict[str, Any],
        files: list[Path],
        index: str | None = None,
        weight_map: dict[str, str] | None = None,
    ) -> Checkpoint:
        tensors: dict[str, TensorInfo] = {}
        for path in files:
            header = read_header(path)
            for name, info in header.tensors.items():
                if name in tensors:
                    raise CheckpointError(f"{path}: tensor {name!r} also appears in {tensors[name].file.name}")
                tensors[name] = info
        if weight_map is not None:
            _check_weight_map(root / (index or SAFETENSORS_INDEX), weight_map, tensors)
        kind = "safetensors-sharded" if index else "safetensors"
        return cls(root, config, kind, files, tensors, [index] if index else [])

    @classmethod
    def _open_indexed(cls, root: Path, config: dict[str, Any], index: str, kind: str) -> Checkpoint:
        index_json = load_json_object(resolve_inside(root, index, "SRC"), index)
        weight_map = index_json.get("weight_map")
        if (
            not isinstance(weight_map, dict)
            or not weight_map
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())
        ):
            raise CheckpointError(f"{root / index}: weight_map must map tensor names to shard file names")
        files: list[Path] = []
        for shard in sorted(set(weight_map.values())):
            path = resolve_inside(root, shard, index)
            try:
                is_file = path.is_file()
            except OSError as exc:  # e.g. a name longer than the filesystem allows
                raise CheckpointError(
                    f"{root / index}: names shard {shard!r}, which cannot be opened ({exc.strerror})"
                ) from exc
            if not is_file:
                raise CheckpointError(
                    f"{root / index}: names shard {shard!r}, which does not exist",
                    hint="the download is incomplete; fetch the missing shard",
                )
            if path not in files:  # 'x.safetensors' and './x.safetensors' are one shard
                files.append(path)
        if kind == "pytorch-bin":
            return cls._open_bin(root, config, files, [index], weight_map)
        return cls._open_safetensors(root, config, files, index, weight_map)

    @classmethod
    def _open_bin(
        cls,
        root: Path,
        config: dict[str, Any],
        files: list[Path],
        indexes: list[str],
        weight_map: dict[str, str] | None = None,
    ) -> Checkpoint:
        import torch

        state: dict[str, Any] = {}
        tensors: dict[str, TensorInfo] = {}
        for path in files:
            loaded = _torch_load(path)
            for name, value in loaded.items():
                if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                    raise CheckpointError(f"{path}: entry {name!r} is not a tensor")
                if name in tensors:
                    raise CheckpointError(f"{path}: tensor {name!r} also appears in {tensors[name].file.name}")
                if value.layout != torch.strided or value.device.type != "cpu":  # sparse, meta: nothing to read
                    raise CheckpointError(
                        f"{path}: tensor {name!r} is not a dense tensor with data ({value.layout}, {value.device})"
                    )
                try:
                    dtype = from_torch(value.dtype)
                except ValueError as exc:
                    raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {value.dtype}") from exc
                nbytes = value.numel() * value.element_size()
                tensors[name] = TensorInfo(name, dtype, tuple(value.shape), path, -1, nbytes)
                state[name] = value
        if weight_map is not None:
            _check_weight_map(root / (indexes[0] if indexes else BIN_INDEX), weight_map, tensors)
        return cls(root, config, "pytorch-bin", files, tensors, indexes, state)

    # -- reading -------------------------------------------------------------------------------

    def read(self, name: str) -> torch.Tensor:
        """Materialise one tensor on the CPU (a private copy; nothing else is loaded)."""
        info = self.tensors[name]
        if info.offset < 0:
            return self._bin_state[name].contiguous().clone()
        return self._materialise(info)

    def read_rows(self, name: str, rows: slice) -> torch.Tensor:
        """Rows ``rows`` of tensor ``name`` (a private copy), reading only their bytes."""
        info = self.tensors[name]
        start, stop, _ = rows.indices(info.shape[0])
        if info.offset < 0:
            return self._bin_state[name][start:stop].contiguous().clone()
        row_bytes = info.nbytes // info.shape[0]
        part = TensorInfo(
            name,
            info.dtype,
            (stop - start, *info.shape[1:]),
            info.file,
            info.offset + start * row_bytes,
            (stop - start) * row_bytes,
        )
        return self._materialise(part)

    def _materialise(self, info: TensorInfo) -> torch.Tensor:
        import torch

        dtype = to_torch(info.dtype)
        if info.nbytes == 0:
            return torch.empty(info.shape, dtype=dtype)
        buf = read_bytes(info, self._fd(info.file))
        return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(info.shape)

    def copy_into(self, name: str, target: ByteTarget, out_name: str, start: int, nbytes: int) -> None:
        """Copy bytes ``[start, start + nbytes)`` of tensor ``name`` unchanged into ``target``'s tensor
        ``out_name`` at the same place (in the kernel when the source is a safetensors file)."""
        info = self.tensors[name]
        if info.offset < 0:
            target.write(out_name, start, tensor_bytes(self._bin_state[name])[start : start + nbytes])
        else:
            target.copy_from(out_name, start, self._fd(info.file), info.offset + start, nbytes)

    def _fd(self, path: Path) -> int:
        with self._fds_lock:  # readers may run in several threads
            if path not in self._fds:
                self._fds[path] = os.open(path, os.O_RDONLY)
            return self._fds[path]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._bin_state.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def total_bytes(self) -> int:
        return sum(info.nbytes for info in self.tensors.values())

    def weight_file_names(self) -> set[str]:
        """Names (relative to root) of files that hold or index weights: not copied as-is."""
        return {str(p.relative_to(self.root)) for p in self.weight_files} | set(self.metadata_files)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of a CPU tensor, without a copy when it is contiguous."""
    import torch

    flat = tensor.contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy().data)


def _check_weight_map(index: Path, weight_map: dict[str, str], tensors: dict[str, TensorInfo]) -> None:
    for name, shard in weight_map.items():
        info = tensors.get(name)
        if info is None:
            raise CheckpointError(f"{index}: maps tensor {name!r} to {shard!r}, but that shard does not hold it")
        if info.file.name != Path(shard).name:
            raise CheckpointError(
                f"{index}: maps tensor {name!r} to {shard!r}, but it is in {info.file.name!r}",
                hint="the index and the shards disagree; re-download the checkpoint",
            )
    unlisted = sorted(set(tensors) - set(weight_map))
    if unlisted:
        raise CheckpointError(
            f"{tensors[unlisted[0]].file}: holds {unlisted[0]!r}, which the index does not list",
            hint="the index and the shards disagree; re-download the checkpoint",
        )


def _torch_load(path: Path) -> dict[str, Any]:
    import torch

    try:
        # torch warns on stderr about some storages it rebuilds (e.g. quantized tensors' TypedStorage); the
        # user is told about such tensors in one error line instead.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                # Legacy (non-zip) pickles cannot be memory-mapped; they are read whole.
                loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused to unpickle objects that are not tensors (weights_only=True)",
            hint="convert the checkpoint to safetensors with a tool you trust",
        ) from exc
    except TORCH_LOAD_ERRORS as exc:
        raise CheckpointError(f"{path}: cannot be read as a PyTorch checkpoint ({type(exc).__name__}: {exc})") from exc
    if isinstance(loaded, dict) and "state_dict" in loaded and isinstance(loaded["state_dict"], dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: does not hold a dict of tensors")
    return loaded
