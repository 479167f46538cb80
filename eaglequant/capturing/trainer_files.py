"""Hidden-state files EAGLE-3 trainers already wrote, read into the capture format (:mod:`.transformers_capture`).

SpecForge's offline data (``scripts/prepare_hidden_states.py``): one ``torch.save`` dict per sample,
``rows_<a>-<b>/data_<i>.ckpt`` (``.ckpt.gz`` when compressed), with ``input_ids`` [S] int64, ``loss_mask`` [S],
``aux_hidden_state`` [1, S, n_aux * H] (the aux layers concatenated in layer order) and ``hidden_state``
[1, S, H] (the target's last hidden state after its final norm). Position t of the draft reads
``aux_hidden_state[t]`` and ``input_ids[t + 1]`` and is trained toward ``lm_head(hidden_state[t + 1])``.

What these files lack: the target's own continuation (the text is the dataset's, teacher-forced through
the target in one prefill) and its logits. With the target's ``lm_head`` (``--target``: its checkpoint
directory; only that one tensor is read) the target's arg-max at every position is recovered exactly from
``hidden_state``, so step 1's acceptance is predicted exactly; later steps read the dataset's tokens, which
are what the engine would read only where the text agrees with the target. Without it the dataset's next
token stands in for the target's choice. Files are read with ``weights_only=True``.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from eaglequant.checkpoint.reader import TORCH_LOAD_ERRORS
from eaglequant.common.errors import InputError

SPECFORGE_KEYS = ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state")


def specforge_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.name.endswith((".ckpt", ".ckpt.gz")))
    if not files:
        raise InputError(f"{directory}: no SpecForge .ckpt files", hint="give prepare_hidden_states.py's output dir")
    return files


def _load(path: Path) -> dict[str, Any]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                record = torch.load(io.BytesIO(handle.read()), map_location="cpu", weights_only=True)
        else:
            record = torch.load(path, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as exc:
        why = str(exc).splitlines()[0] if str(exc) else ""
        raise InputError(
            f"{path}: not a SpecForge hidden-state file ({type(exc).__name__}{f': {why}' if why else ''})",
            hint="give prepare_hidden_states.py's output dir",
        ) from None
    missing = [k for k in SPECFORGE_KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise InputError(f"{path}: no {missing[0]!r}", hint=f"SpecForge files hold {', '.join(SPECFORGE_KEYS)}")
    return record


def read_specforge(directory: Path, lm_head: torch.Tensor | None, top_k: int) -> Iterator[dict[str, Any]]:
    """One capture record per SpecForge sample, one sample in memory at a time (trailing padding and positions
    outside the loss mask dropped from the end; the first trained position is where drafting starts)."""
    records = 0
    for path in specforge_files(directory):
        data = _load(path)
        ids = data["input_ids"].reshape(-1).to(torch.int64)
        mask = data["loss_mask"].reshape(-1)
        trained = torch.nonzero(mask).reshape(-1)
        if len(trained) < 2:
            continue
        first, last = int(trained[0]), int(trained[-1]) + 1
        if lm_head is None:  # the dataset's next token stands in for the target's choice: one position less
            last = min(last, len(ids) - 1)
        aux = data["aux_hidden_state"].reshape(len(ids), -1)[: last - 1].to(torch.float32)
        record: dict[str, Any] = {
            "hidden_states": aux,
            "input_ids": ids[1:last],
            "continuation_start": max(first - 1, 0),
        }
        if lm_head is not None:
            final = data["hidden_state"].reshape(len(ids), -1)[1:last].to(torch.float32)
            probs = torch.softmax(final @ lm_head.T, -1)
        else:
            probs = torch.nn.functional.one_hot(ids[2 : last + 1], int(ids.max()) + 1).to(torch.float32)
        top = probs.topk(min(top_k, probs.shape[-1]), -1)
        record["target_top_ids"], record["target_top_probs"] = top.indices, top.values
        records += 1
        yield record
    if not records:
        raise InputError(f"{directory}: no SpecForge sample has two or more trained positions")
