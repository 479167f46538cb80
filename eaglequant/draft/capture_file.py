"""The capture file, written one sequence at a time: what ``--calib``, ``--inputs`` and ``--counts`` read.

One safetensors file holds S sequences padded to the longest, T positions:

- ``hidden_states`` [S, T, n_aux * H] and ``input_ids`` [S, T]: draft position t reads the aux states at target
  position t and the token at t + 1 (the ``--calib`` format; the draft predicts the token after it);
- ``lengths`` [S]: valid positions of each sequence (the rest is padding);
- ``continuation_start`` [S]: the first draft position whose token the target generated (the prompt's length
  minus one): where the engine starts drafting;
- ``max_new_tokens`` [S]: the tokens the engine generates a prompt (the capture holds k - 1 more, so that its
  last draft can be judged); -1 where not limited (trainer files);
- ``target_top_ids`` / ``target_top_probs`` [S, T, K]: the target's K most likely next tokens after draft
  position t's token and their probabilities (temperature 1), the reference a draft's choice is judged by.

:class:`CaptureWriter` keeps each sequence in a file of its own beside OUT as it arrives (from any producer: the
transformers target, an engine's probe, a trainer's files), then writes OUT tensor by tensor, one sequence row
at a time, and renames it into place: memory holds one sequence, whatever the number of prompts.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eaglequant.common.atomic import replaced_whole
from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import JsonRecord

# Each sequence's tensors, by name: (dtype, whether the tensor has a position axis to pad). The hidden states keep
# the dtype their producer computed them in (an engine serving in bf16 gives 2 bytes a value, half of float32's).
SEQUENCE_TENSORS: dict[str, tuple[torch.dtype | None, bool]] = {
    "hidden_states": (None, True),
    "input_ids": (torch.int64, True),
    "target_top_ids": (torch.int64, True),
    "target_top_probs": (torch.float32, True),
    "continuation_start": (torch.int64, False),
    "max_new_tokens": (torch.int64, False),
}
_SAFETENSORS_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64"}


@dataclass(frozen=True)
class CaptureSummary(JsonRecord):
    path: Path
    sequences: int
    positions: int
    continuation_positions: int
    aux_layer_ids: tuple[int, ...]
    prompts_from: str


def output_path(out: str | Path) -> Path:
    """OUT, checked before anything is loaded: a ``.safetensors`` file (replaced if there) that is not a directory,
    in a directory this process can write."""
    out_path = Path(out)
    if out_path.suffix != ".safetensors":
        raise InputError(f"{out_path}: the output must be a .safetensors file", hint="e.g. captured.safetensors")
    if out_path.is_dir():
        raise InputError(f"{out_path}: is a directory, not a capture file", hint="give a file name inside it")
    parent = next((p for p in (out_path.parent, *out_path.parent.parents) if p.exists()), Path("."))
    if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        raise InputError(f"{out_path}: {parent} is not a directory this user can write", hint="choose another OUT")
    return out_path


class CaptureWriter:
    """``add`` sequences (records of :data:`SEQUENCE_TENSORS`, or files a probe wrote into :attr:`parts`), then
    ``finish``: OUT appears complete or not at all. Use as a context manager so the parts go in every case."""

    def __init__(self, out: str | Path) -> None:
        self.path = output_path(out)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.parts = self.path.with_name(f".{self.path.name}.parts")
        shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir()
        self._count = 0

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.parts, ignore_errors=True)

    def add(self, record: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        tensors = {name: _tensor(record, name, dtype) for name, (dtype, _) in SEQUENCE_TENSORS.items()}
        save_file(tensors, str(self.parts / f"sequence-{self._count:06d}.safetensors"))
        self._count += 1

    def add_all(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.add(record)

    def finish(self, ids: tuple[int, ...], origin: str, metadata: dict[str, str]) -> CaptureSummary:
        """Write OUT from the sequences in :attr:`parts` (in name order) and return what it holds."""
        from eaglequant.checkpoint.writer import TensorSpec, safetensors_header

        files = sorted(self.parts.glob("sequence-*.safetensors"))
        if not files:
            raise InputError(f"{self.path}: no sequence was captured", hint="give at least one prompt or sample")
        shapes = [_shapes(file) for file in files]
        longest = max(shape["input_ids"][0] for shape in shapes)
        widths = {name: shapes[0][name][1:] for name, (_, padded) in SEQUENCE_TENSORS.items() if padded}
        _check_widths(files, shapes, widths)
        specs = [_spec(name, len(files), longest, widths) for name in (*SEQUENCE_TENSORS, "lengths")]
        with replaced_whole(self.path) as partial, open(partial, "wb") as handle:
            handle.write(
                safetensors_header(
                    [TensorSpec(*s) for s in specs], {**metadata, "aux_layer_ids": json.dumps(list(ids))}
                )
            )
            for name in SEQUENCE_TENSORS:
                for file in files:
                    handle.write(_row(file, name, longest))
            handle.write(torch.tensor([s["input_ids"][0] for s in shapes], dtype=torch.int64).numpy().tobytes())
        return self._summary(files, shapes, ids, origin)

    def _summary(
        self, files: list[Path], shapes: list[dict[str, tuple[Any, ...]]], ids: tuple[int, ...], origin: str
    ) -> CaptureSummary:
        from safetensors import safe_open

        starts = []
        for file in files:
            with safe_open(str(file), "pt") as handle:
                starts.append(int(handle.get_tensor("continuation_start")))
        lengths = [shape["input_ids"][0] for shape in shapes]
        after = sum(length - start for length, start in zip(lengths, starts, strict=True))
        return CaptureSummary(self.path, len(files), sum(lengths), after, ids, origin)


def _tensor(record: dict[str, Any], name: str, dtype: torch.dtype | None) -> torch.Tensor:
    value = torch.as_tensor(record.get(name, -1 if name == "max_new_tokens" else None))
    if dtype is None and value.dtype not in _SAFETENSORS_DTYPE:
        dtype = torch.float32
    return (value if dtype is None else value.to(dtype)).contiguous()


def _shapes(file: Path) -> dict[str, tuple[Any, ...]]:
    """Each tensor's shape, and the hidden states' dtype as the last item of theirs (so sequences of another dtype
    are told apart as those of another width are)."""
    from safetensors import safe_open

    with safe_open(str(file), "pt") as handle:
        shapes: dict[str, tuple[Any, ...]] = {n: tuple(handle.get_slice(n).get_shape()) for n in SEQUENCE_TENSORS}
        shapes["hidden_states"] += (handle.get_slice("hidden_states").get_dtype(),)
    return shapes


def _check_widths(files: list[Path], shapes: list[dict[str, tuple[Any, ...]]], widths: dict[str, Any]) -> None:
    for file, shape in zip(files, shapes, strict=True):
        for name, width in widths.items():
            if shape[name][1:] != width or shape[name][0] != shape["input_ids"][0]:
                raise InputError(
                    f"{file.name}: {name!r} is {list(shape[name])}, the first sequence's {list(width)} a position",
                    hint="every sequence of one capture must come from one target and one draft",
                )


def _spec(name: str, count: int, longest: int, widths: dict[str, tuple[Any, ...]]) -> tuple[str, str, tuple[int, ...]]:
    if name == "lengths":
        return name, "I64", (count,)
    dtype, padded = SEQUENCE_TENSORS[name]
    width = widths.get(name, ())
    if dtype is None:  # the hidden states: their dtype, as the sequences' files hold it, ends their width
        width, stored = width[:-1], str(width[-1])
    else:
        stored = _SAFETENSORS_DTYPE[dtype]
    shape = (count, longest, *width) if padded else (count,)
    return name, stored, shape


def _row(file: Path, name: str, longest: int) -> bytes:
    """Tensor ``name`` of one sequence file, zero-padded to ``longest`` positions, as bytes."""
    from safetensors import safe_open

    with safe_open(str(file), "pt") as handle:
        value = handle.get_tensor(name)
    if SEQUENCE_TENSORS[name][1] and value.shape[0] < longest:
        pad = [0, 0] * (value.dim() - 1) + [0, longest - value.shape[0]]
        value = torch.nn.functional.pad(value, pad)
    return bytes(value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
