"""How often the target emits each token: what a pruned draft vocabulary keeps.

Counted from captured inputs (``eaglequant capture``: the target's own next-token choice at every valid position)
or read from a token-count file a trainer already has: JSON (a list of counts indexed by token id, or an object of
token id -> count) or safetensors (one 1-D integer tensor, or one named ``counts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from eaglequant.common.errors import InputError, Param, given, words

if TYPE_CHECKING:
    from eaglequant.layouts.head import HeadDescription


@dataclass(frozen=True)
class TokenCounts:
    counts: torch.Tensor  # int64 [vocab]: how often the target chose each token
    origin: str  # where they came from, in words

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def read_counts(
    path: Path, vocab_size: int, parameter: str = "counts", head: HeadDescription | None = None
) -> TokenCounts:
    """The counts in ``path`` (captured inputs, a directory of vLLM connector files, or a token-count file), checked
    against the target's vocabulary; with ``head``, captured inputs are checked to be of the target it drafts for."""
    from eaglequant.draft.connector_files import as_capture_file

    where = given(parameter, str(path))
    path = as_capture_file(path, parameter) if path.is_dir() else path
    if not path.is_file():
        raise InputError(words(where, ": no such file"), hint="give captured inputs or a token-count file")
    if head is not None:
        check_counts_for(head, path, parameter)
    if path.suffix == ".json":
        counts, origin = _json_counts(path, where), f"token counts in {path.name}"
    else:
        counts, origin = _safetensors_counts(path, where, vocab_size)
    if counts.dim() != 1 or counts.numel() == 0:
        raise InputError(words(where, ": the counts must be one list of numbers"), hint="one count per token id")
    if counts.numel() > vocab_size:
        raise InputError(
            words(where, f": counts for {counts.numel()} token ids, but the target's vocabulary has {vocab_size}"),
            hint="count the tokens of the target this draft serves",
        )
    if bool((counts < 0).any()):
        raise InputError(words(where, ": a count is negative"), hint="counts are how often each token occurs")
    padded = torch.zeros(vocab_size, dtype=torch.int64)
    padded[: counts.numel()] = counts.to(torch.int64)
    if int(padded.sum()) == 0:
        raise InputError(words(where, ": every count is zero"), hint="count the target's tokens on real text")
    return TokenCounts(padded, origin)


def check_counts_for(head: HeadDescription, path: Path, parameter: str = "counts") -> None:
    """Captured inputs given as counts were captured from the target ``head`` drafts for: its vocabulary (their aux
    layers do not matter to counts). A token-count file records nothing to check."""
    from eaglequant.draft.capture_file import check_capture_for, read_provenance

    if path.is_file() and path.suffix == ".safetensors":
        check_capture_for(head, read_provenance(path, parameter), given(parameter, str(path)), inputs=False)


def _json_counts(path: Path, where: Param) -> torch.Tensor:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(words(where, f": not JSON ({exc})"), hint="a list of counts, or {token id: count}") from None
    if isinstance(data, dict):
        try:
            pairs = {int(key): value for key, value in data.items()}
        except ValueError:
            raise InputError(words(where, ": a key is not a token id"), hint='keys are token ids: {"42": 7}') from None
        if any(key < 0 for key in pairs):
            raise InputError(words(where, ": a token id is negative"), hint="token ids start at 0")
        values = [0] * (max(pairs, default=-1) + 1)
        for key, value in pairs.items():
            values[key] = value
        data = values
    if not isinstance(data, list) or not all(type(v) is int for v in data):
        raise InputError(words(where, ": counts must be whole numbers"), hint="a list of counts, or {token id: count}")
    return torch.tensor(data, dtype=torch.int64)


def _safetensors_counts(path: Path, where: Param, vocab_size: int) -> tuple[torch.Tensor, str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            names = set(handle.keys())
            if "target_top_ids" in names:
                return _captured_counts(handle, names, vocab_size, where), f"the target's choices in {path.name}"
            chosen = "counts" if "counts" in names else (next(iter(names)) if len(names) == 1 else None)
            if chosen is None:
                raise InputError(
                    words(where, ": neither captured inputs (target_top_ids) nor one tensor of counts"),
                    hint="capture inputs with `eaglequant capture`, or save one tensor named counts",
                )
            counts = handle.get_tensor(chosen)
    except SafetensorError as exc:
        raise InputError(
            words(where, f": not a safetensors file ({exc})"), hint="give a .safetensors or .json"
        ) from None
    if counts.is_floating_point() or counts.dtype == torch.bool:
        raise InputError(words(where, f": {chosen!r} is {counts.dtype}, not whole counts"), hint="save integer counts")
    return counts, f"token counts in {path.name}"


def _captured_counts(handle: object, names: set[str], vocab_size: int, where: Param) -> torch.Tensor:
    """The target's top choice at every valid position of every captured sequence, counted."""
    top = handle.get_tensor("target_top_ids")  # type: ignore[attr-defined]
    if top.dim() == 2:
        top = top[None]
    choices = top[..., 0].long()
    lengths = handle.get_tensor("lengths").tolist() if "lengths" in names else [choices.shape[1]] * len(choices)  # type: ignore[attr-defined]
    valid = torch.cat([row[:length] for row, length in zip(choices, lengths, strict=True)])
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= vocab_size):
        raise InputError(
            words(where, f": holds token id {int(valid.max())}, outside the target's vocabulary of {vocab_size}"),
            hint="capture the inputs with the target this draft serves",
        )
    return torch.bincount(valid, minlength=vocab_size)
