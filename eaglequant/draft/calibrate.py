"""Calibrated activation scales: the input amax of every linear, from captured draft inputs.

The calibration file is a safetensors file holding, for S sequences of T tokens:

- ``hidden_states``: [S, T, n_aux * H_target] (or [T, ...] for one sequence), the target's auxiliary
  hidden states concatenated as the draft's ``fc`` reads them;
- ``input_ids``: [S, T] int64, the tokens whose embeddings the draft reads;
- ``input_embeds``: [S, T, H], only for heads without ``embed_tokens`` (they share the target's);
- ``lengths``: [S] int64, optional: the valid positions of each sequence when they differ (the rest is
  padding). ``eaglequant capture`` writes it, with the target's choices for predicting acceptance
  (:mod:`eaglequant.draft.capture_file`).

A directory of the files vLLM's hidden-states connector writes is read as such a file
(:mod:`eaglequant.draft.connector_files`).

The head runs forward in float32 (:mod:`eaglequant.draft.forward`) and each linear records max |x|
over every token. Linears an engine fuses read the same input, so they share one amax.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import EagleQuantError, InputError, Param, given, words
from eaglequant.draft.forward import DraftForward
from eaglequant.draft.weights import CanonicalWeights
from eaglequant.layouts.head import HeadDescription, Role


def load_calibration(
    path: str | Path, head: HeadDescription, parameter: str = "calib"
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(aux hidden [T, n_aux*H_t], embeds-or-ids) per sequence, validated against the head's dims. ``parameter``
    names the file in messages (the option that gave it)."""
    from eaglequant.draft.connector_files import as_capture_file

    where = given(parameter, str(path))
    path = as_capture_file(Path(path), parameter, head.dims.num_aux_hidden_states)
    if not path.exists():
        raise InputError(words(where, ": no such file"), hint="give the captured draft inputs' .safetensors file")
    if not path.is_file() or path.suffix != ".safetensors":
        raise InputError(words(where, ": not a .safetensors file"))
    from eaglequant.draft.capture_file import check_capture_for, read_provenance

    check_capture_for(head, read_provenance(path, parameter), where)
    try:
        calib = Checkpoint.open_file(path)
    except EagleQuantError as exc:
        raise InputError(words(where, f": {exc.message}")) from exc
    with calib:
        tensors = {name: calib.read(name) for name in calib.tensors}
    dims = head.dims
    width = dims.num_aux_hidden_states * dims.target_hidden_size
    hidden = tensors.get("hidden_states")
    if hidden is None:
        raise InputError(words(where, f": no tensor 'hidden_states' [S, T, {width}]"))
    if hidden.dim() == 2:
        hidden = hidden[None]
    if hidden.dim() != 3 or hidden.shape[-1] != width or not hidden.is_floating_point():
        raise InputError(words(where, f": 'hidden_states' is {list(hidden.shape)}, expected [S, T, {width}]"))
    hidden = hidden.to(torch.float32)  # bf16 where the engine served the target in bf16
    sequences, tokens = hidden.shape[:2]
    lengths = _lengths(tensors.get("lengths"), sequences, tokens, where)
    if "input_embeds" in tensors:
        embeds = tensors["input_embeds"].reshape(sequences, tokens, -1)
        if embeds.shape[-1] != dims.hidden_size:
            raise InputError(words(where, f": 'input_embeds' must be [S, T, {dims.hidden_size}]"))
        return [(hidden[i, : lengths[i]], embeds[i, : lengths[i]]) for i in range(sequences)]
    ids = tensors.get("input_ids")
    if ids is None or ids.numel() != sequences * tokens or ids.is_floating_point():
        raise InputError(words(where, f": 'input_ids' must be an integer tensor [S, T] = [{sequences}, {tokens}]"))
    if "embed_tokens" not in head.features:
        raise InputError(
            words(where, ": this head has no embed_tokens (it shares the target's)"),
            hint="capture 'input_embeds' [S, T, H] from the target instead of 'input_ids'",
        )
    ids = ids.reshape(sequences, tokens).to(torch.int64)
    vocab = next(t.info.shape[0] for t in head.tensors if t.role is Role.EMBEDDING)
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise InputError(words(where, f": token ids outside the vocabulary [0, {vocab})"))
    return [(hidden[i, : lengths[i]], ids[i, : lengths[i]]) for i in range(sequences)]


def _lengths(lengths: torch.Tensor | None, sequences: int, tokens: int, where: Param) -> list[int]:
    if lengths is None:
        return [tokens] * sequences
    if lengths.is_floating_point() or lengths.numel() != sequences:
        raise InputError(words(where, f": 'lengths' must be an integer tensor [S] = [{sequences}]"))
    found = [int(n) for n in lengths.reshape(-1)]
    if min(found) < 1 or max(found) > tokens:
        raise InputError(words(where, f": 'lengths' must be between 1 and {tokens}"))
    return found


def calibrate(checkpoint: Checkpoint, head: HeadDescription, path: str | Path) -> dict[str, float]:
    """Canonical linear module -> max |input| over the calibration set (fused members share it)."""
    samples = load_calibration(path, head)
    weight = CanonicalWeights(checkpoint, head)
    amax: dict[str, float] = {}

    def observed(module: str, x: torch.Tensor) -> torch.Tensor:
        amax[module] = max(amax.get(module, 0.0), float(x.abs().max()))
        return forward.plain_linear(module, x)

    forward = DraftForward(head, weight, observed)
    with torch.no_grad():
        for hidden, tokens in samples:
            embeds = tokens if tokens.is_floating_point() else weight.gather("embed_tokens.weight", tokens)
            forward(hidden, embeds, logits="lm_head" in {lin.module for lin in head.linears})
    for group in head.fused_groups:
        shared = max(amax.get(m, 0.0) for m in group.members)
        for member in group.members:
            amax[member] = shared
    return amax
