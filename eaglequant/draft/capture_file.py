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

The header's ``__metadata__`` records what the capture was made for (:class:`CaptureProvenance`): the aux layer
ids captured and each one's hidden size, the target (as given), its layer count and vocabulary size, and the
SHA-256 of the prompts' texts; a producer that does not know one leaves it out. A MoE target run with transformers
adds its routing's counts (``routing``: :mod:`eaglequant.draft.capture_routing`), what its routing locality is
measured from. :func:`check_capture_for` refuses
a capture whose aux layer ids, hidden size or target vocabulary are not the draft's, naming the field.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eaglequant.common.atomic import replaced_whole
from eaglequant.common.errors import InputError, Param, given, words
from eaglequant.common.json_fields import NOT_WRITTEN, JsonRecord, named
from eaglequant.draft.capture_routing import RoutingLocality

if TYPE_CHECKING:
    from eaglequant.layouts.head import HeadDescription

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


def _unless_none(value: Any) -> Any:
    """Written only where there is one: a dense target's capture writes what it always has."""
    return NOT_WRITTEN if value is None else value


@dataclass(frozen=True)
class CaptureSummary(JsonRecord):
    json_values = named(routing_locality=_unless_none, routing_note=_unless_none)

    path: Path
    sequences: int
    positions: int
    continuation_positions: int
    aux_layer_ids: tuple[int, ...]
    prompts_from: str
    # a MoE target's routing locality, measured from its router where capture ran it (None: not measured)
    routing_locality: RoutingLocality | None = None
    routing_note: str | None = None  # why a MoE target's routing locality was not measured


@dataclass(frozen=True)
class CaptureProvenance:
    """What a capture file records it was made for; None where the file does not say (files written before these
    were recorded, and producers that do not know one: a trainer's files say nothing of the prompts)."""

    aux_layer_ids: tuple[int, ...] | None = None  # ``aux_layer_ids``: the target layers captured, in order
    hidden_size: int | None = None  # ``draft_hidden_size``: the width of one aux layer's state, as the draft reads it
    target: str | None = None  # ``target``: the target as it was given
    target_layers: int | None = None  # ``target_layers``
    target_vocab_size: int | None = None  # ``target_vocab_size``
    prompts_sha256: str | None = None  # ``prompts_sha256``: see :func:`prompts_sha256`


def aux_layer_ids(config: dict[str, Any]) -> tuple[int, ...] | None:
    """The draft's aux hidden-state layer ids from its config.json (SpecForge/vLLM or speculators keys)."""
    for holder in (config, config.get("eagle_config")):  # vLLM reads the top level first
        ids = holder.get("eagle_aux_hidden_state_layer_ids") if isinstance(holder, dict) else None
        if isinstance(ids, list) and ids and all(type(i) is int for i in ids):
            return tuple(ids)
    return None


def prompts_sha256(prompts: Iterable[str]) -> str:
    """The SHA-256 of the prompts' texts in order: of their JSON list (UTF-8, not ASCII-escaped)."""
    return hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode("utf-8")).hexdigest()


def made_for(
    *,
    target: str | Path | None = None,
    target_layers: int | None = None,
    target_vocab_size: int | None = None,
    prompts: Iterable[str] | None = None,
) -> dict[str, str]:
    """The ``__metadata__`` entries a producer knows of the target and the prompts (those it does not, left out);
    :meth:`CaptureWriter.finish` adds the aux layer ids and their hidden size."""
    known = {
        "target": None if target is None else str(target),
        "target_layers": None if target_layers is None else str(target_layers),
        "target_vocab_size": None if target_vocab_size is None else str(target_vocab_size),
        "prompts_sha256": None if prompts is None else prompts_sha256(prompts),
    }
    return {key: value for key, value in known.items() if value is not None}


def read_provenance(path: Path, parameter: str = "inputs") -> CaptureProvenance:
    """The provenance a capture file's header records (every field None for a file without any)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata() or {}
    except SafetensorError:
        return CaptureProvenance()  # not a safetensors file: its reader says so
    where = given(parameter, str(path))
    ids = _recorded(metadata, "aux_layer_ids", where)
    if ids is not None and not (isinstance(ids, list) and all(type(i) is int for i in ids)):
        raise InputError(words(where, f": aux_layer_ids is {ids!r}, not a list of layer ids"), hint=_AGAIN)
    numbers = {}
    for key in ("draft_hidden_size", "target_layers", "target_vocab_size"):
        value = _recorded(metadata, key, where)
        if value is not None and (type(value) is not int or value <= 0):
            raise InputError(words(where, f": {key} is {value!r}, not a positive integer"), hint=_AGAIN)
        numbers[key] = value
    return CaptureProvenance(
        tuple(ids) if ids else None,  # [] where the producer did not know them
        numbers["draft_hidden_size"],
        metadata.get("target"),
        numbers["target_layers"],
        numbers["target_vocab_size"],
        metadata.get("prompts_sha256"),
    )


_AGAIN = "capture the inputs again: `eaglequant capture --target T --draft DRAFT OUT`"


def _recorded(metadata: dict[str, str], key: str, where: Param) -> Any:
    if key not in metadata:
        return None
    try:
        return json.loads(metadata[key])
    except json.JSONDecodeError:
        raise InputError(words(where, f": {key} is {metadata[key]!r}, not JSON"), hint=_AGAIN) from None


def check_capture_for(
    head: HeadDescription, provenance: CaptureProvenance, where: Param, *, inputs: bool = True
) -> None:
    """Refuse a capture made for another draft or target, in one line naming the field and both values: the aux
    layer ids (the draft's config's, else their count) and their hidden size, where ``inputs`` (the draft reads the
    hidden states); the target's vocabulary against the draft's ``vocab_size`` in every case (token counts too).
    A field the file does not record is not checked."""
    dims = head.dims
    captured = provenance.aux_layer_ids
    if inputs and captured is not None:
        reads = aux_layer_ids(head.config)
        if reads is not None and captured != reads:
            _refuse(where, f"aux_layer_ids {list(captured)} were captured; this draft reads {list(reads)}")
        if reads is None and len(captured) != dims.num_aux_hidden_states:
            _refuse(
                where,
                f"aux_layer_ids {list(captured)} were captured; "
                f"this draft reads {dims.num_aux_hidden_states} aux layers",
            )
    if inputs and provenance.hidden_size is not None and provenance.hidden_size != dims.target_hidden_size:
        _refuse(
            where,
            f"draft_hidden_size {provenance.hidden_size} was captured; this draft reads {dims.target_hidden_size}",
        )
    vocab = provenance.target_vocab_size
    if vocab is not None and dims.vocab_size is not None and vocab != dims.vocab_size:
        _refuse(
            where,
            f"target_vocab_size {vocab} was captured (target {provenance.target or 'unnamed'}); "
            f"this draft's vocab_size is {dims.vocab_size}",
        )


def _refuse(where: Param, what: str) -> None:
    raise InputError(
        words(where, f": {what}"),
        hint="capture again for this draft and its target: `eaglequant capture --target T --draft DRAFT OUT`",
    )


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
        recorded = {**metadata, "aux_layer_ids": json.dumps(list(ids))}
        width = widths["hidden_states"][-2]  # the last item is the dtype
        if ids and width % len(ids) == 0:
            recorded["draft_hidden_size"] = str(width // len(ids))
        with replaced_whole(self.path) as partial, open(partial, "wb") as handle:
            handle.write(safetensors_header([TensorSpec(*s) for s in specs], recorded))
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
