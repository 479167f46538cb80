"""The files vLLM's hidden-states connector writes, read as captured draft inputs.

vLLM's ``extract_hidden_states`` speculative method with ``ExampleHiddenStatesConnector`` (0.32:
``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``) writes one safetensors file a
request, ``<shared_storage_path>/<request id>.safetensors``: ``hidden_states`` [T, n_layers, H] (the target's
states at ``eagle_aux_hidden_state_layer_ids``, in that order; layer id i is the input of decoder layer i, and
the target's depth is its last layer's output before the final norm) and ``token_ids`` [T] (the prompt, or with
``include_output_tokens`` the prompt and all but the last generated token). While a file is being written a
``<file>.lock`` beside it is held. speculators' offline data generation stores its EAGLE-3 training data this way.

A file holding the draft's aux layers and one more carries the target's last layer last (the layer ids speculators
captures: the aux layers, then the depth): with the target's final norm and ``lm_head`` (a few GB, not the whole
target) the target's top-K at every position is recovered exactly. Otherwise the file's next token stands in for
the target's choice, exact where the text is the target's own greedy continuation. Every position is judged: the
files do not say where a prompt ends.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.errors import InputError, given, words

if TYPE_CHECKING:
    import torch

_KEYS = ("hidden_states", "token_ids")


@dataclass(frozen=True)
class OutputHead:
    """The target's final RMSNorm and ``lm_head``: its next-token distribution from its last layer's output."""

    norm: torch.Tensor
    eps: float
    lm_head: torch.Tensor

    def probabilities(self, last_layer: torch.Tensor) -> torch.Tensor:
        import torch

        x = last_layer.to(torch.float32)
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm
        return torch.softmax(normed @ self.lm_head.T, -1)


def target_lm_head(target: Path) -> torch.Tensor:
    """The target's output embedding (``lm_head.weight``, or the input embedding when tied), one tensor read."""
    import torch

    from eaglequant.checkpoint.reader import Checkpoint, load_json_object

    config = load_json_object(target / "config.json", "config.json")
    with Checkpoint.open(target, "TARGET") as checkpoint:
        names = [n for n in checkpoint.tensors if n.endswith("lm_head.weight")]
        if not names or config.get("tie_word_embeddings"):
            names = [n for n in checkpoint.tensors if n.endswith("embed_tokens.weight")]
        if not names:
            raise InputError(words(given("target", str(target)), ": no lm_head.weight or embed_tokens.weight"))
        return checkpoint.read(names[0]).to(torch.float32)


def target_output_head(target: Path) -> OutputHead:
    """The target's final norm and ``lm_head`` (two tensors read, whatever the target's size)."""
    import torch

    from eaglequant.checkpoint.reader import Checkpoint, load_json_object
    from eaglequant.engines.served_length import text_config

    text = text_config(load_json_object(target / "config.json", "config.json"))
    with Checkpoint.open(target, "TARGET") as checkpoint:
        names = [n for n in checkpoint.tensors if n.endswith("norm.weight") and ".layers." not in n]
        final = [n for n in names if n.endswith("model.norm.weight")] or names
        if len(final) != 1:
            raise InputError(words(given("target", str(target)), ": no single final norm (model.norm.weight)"))
        norm = checkpoint.read(final[0]).to(torch.float32)
    return OutputHead(norm, float(text.get("rms_norm_eps", 1e-6)), target_lm_head(target))


def connector_files(directory: Path, parameter: str) -> list[Path]:
    """The connector's files in ``directory``, in name order; one whose write never finished is refused."""
    where = given(parameter, str(directory))
    if not directory.is_dir():
        raise InputError(words(where, ": no such directory"), hint="give the connector's shared_storage_path")
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    unfinished = sorted(
        lock for lock in directory.glob("*.safetensors.lock") if not lock.with_name(lock.name[: -len(".lock")]).exists()
    )
    if unfinished:
        missing = unfinished[0].name[: -len(".lock")]
        raise InputError(
            words(where, f": {missing} is missing beside its .lock (the connector's write did not finish)"),
            hint="wait for the engine to finish, or remove the .lock of a request that failed",
        )
    if not files:
        raise InputError(
            words(where, ": no hidden-state files (vLLM's connector writes <request id>.safetensors)"),
            hint="give the connector's shared_storage_path",
        )
    return files


def read_connector_file(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``hidden_states`` [T, n, H] and ``token_ids`` [T] of one file, checked."""
    import torch
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            missing = [k for k in _KEYS if k not in handle.keys()]  # noqa: SIM118 - safe_open is not a dict
            if missing:
                raise InputError(
                    f"{path}: no {missing[0]!r}", hint="vLLM's hidden-states connector writes " + " and ".join(_KEYS)
                )
            hidden, tokens = handle.get_tensor("hidden_states"), handle.get_tensor("token_ids")
    except SafetensorError as exc:
        raise InputError(f"{path}: not a safetensors file ({exc})") from None
    if hidden.dim() != 3 or tokens.dim() != 1 or hidden.shape[0] != tokens.shape[0] or tokens.is_floating_point():
        raise InputError(
            f"{path}: hidden_states {list(hidden.shape)} and token_ids {list(tokens.shape)} do not match",
            hint="hidden_states is [T, n_layers, H] and token_ids [T]",
        )
    return hidden, tokens.to(torch.int64)


def read_hidden_states(
    directory: Path, aux_count: int | None, head: OutputHead | None, top_k: int, parameter: str = "hidden_states"
) -> Iterator[dict[str, Any]]:
    """One capture record per connector file (see :mod:`.capture_file`), one file in memory at a time.
    ``aux_count``: the layers the draft reads (None: every layer the files hold)."""
    for path in connector_files(directory, parameter):
        hidden, tokens = read_connector_file(path)
        layers = hidden.shape[1]
        aux_count = layers if aux_count is None else aux_count
        if layers not in (aux_count, aux_count + 1):
            raise InputError(
                f"{path}: holds {layers} layers; the draft reads {aux_count} (and one more is the target's last)",
                hint="give the files captured for this draft's eagle_aux_hidden_state_layer_ids",
            )
        if len(tokens) < 3:
            continue
        last_layer = hidden[:, aux_count] if layers > aux_count and head is not None else None
        yield _record(hidden[:, :aux_count], tokens, last_layer, head, top_k)


def _record(
    aux: torch.Tensor, tokens: torch.Tensor, last_layer: torch.Tensor | None, head: OutputHead | None, top_k: int
) -> dict[str, Any]:
    import torch

    if last_layer is not None and head is not None:  # after token t + 1: the target's own distribution
        probs = head.probabilities(last_layer[1:])
        end = len(tokens)
    else:  # the file's next token stands in: one position less
        end = len(tokens) - 1
        probs = torch.nn.functional.one_hot(tokens[2:], int(tokens.max()) + 1).to(torch.float32)
    top = probs.topk(min(top_k, probs.shape[-1]), -1)
    return {
        "hidden_states": aux[: end - 1].reshape(end - 1, -1).to(torch.float32),
        "input_ids": tokens[1:end],
        "target_top_ids": top.indices,
        "target_top_probs": top.values,
        "continuation_start": 0,
    }


_converted: dict[tuple[str, int | None], Path] = {}


def as_capture_file(path: Path, parameter: str, aux_count: int | None = None) -> Path:
    """``path`` itself when it is a file; a directory of connector files converted once a process into a capture
    file (the files' next tokens standing in for the target's choices), so ``--inputs``, ``--calib`` and
    ``--counts`` read either."""
    if not path.is_dir():
        return path
    key = (str(path.resolve()), aux_count)
    if key not in _converted:
        from eaglequant.draft.capture_file import CaptureWriter

        scratch = Path(tempfile.mkdtemp(prefix="eaglequant-connector-"))
        atexit.register(shutil.rmtree, scratch, True)
        with CaptureWriter(scratch / "captured.safetensors") as writer:
            writer.add_all(read_hidden_states(path, aux_count, None, 1, parameter))
            writer.finish((), str(path), {"hidden_states_from": json.dumps(str(path))})
        _converted[key] = writer.path
    return _converted[key]


def inputs_sha256(path: Path) -> str:
    """The SHA-256 of captured inputs: the file's, or for a directory of connector files one digest over each
    file's name and SHA-256, in name order."""
    import hashlib

    from eaglequant.checkpoint.hashing import file_sha256

    if path.is_dir():
        files = connector_files(path, "inputs")
        listed = "".join(f"{file.name}:{file_sha256(file)}\n" for file in files)
        return hashlib.sha256(listed.encode()).hexdigest()
    return file_sha256(path)
