"""Captured draft inputs, from a transformers-loadable target: what ``--calib`` and ``verify --inputs`` read.

The target continues each prompt greedily (what an engine's greedy speculative decoding reproduces), then one
forward over prompt + continuation gives, at every position, the hidden states at the draft's aux layer ids
(vLLM's numbering: layer id i is the input of decoder layer i, transformers' ``hidden_states[i]``) and the
target's next-token distribution. Written as one safetensors file, the ``--calib`` format extended:

- ``hidden_states`` [S, T, n_aux * H] and ``input_ids`` [S, T]: draft position t reads the aux states at target
  position t and the token at t + 1 (the ``--calib`` format; the draft predicts the token after it);
- ``lengths`` [S]: valid positions of each sequence (the rest is padding);
- ``continuation_start`` [S]: the first draft position whose token the target generated (the prompt's length
  minus one): where the engine starts drafting;
- ``max_new_tokens`` [S]: the tokens the engine generates a prompt (the capture holds k - 1 more, so that its
  last draft can be judged); -1 for trainer files;
- ``target_top_ids`` / ``target_top_probs`` [S, T, K]: the target's K most likely next tokens after draft
  position t's token and their probabilities (temperature 1), the reference a draft's choice is judged by.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.json_fields import record_json

DEFAULT_TOP_K = 8


@dataclass(frozen=True)
class CaptureSummary:
    path: Path
    sequences: int
    positions: int
    continuation_positions: int
    aux_layer_ids: tuple[int, ...]
    prompts_from: str

    def to_json(self) -> dict[str, Any]:
        return record_json(self)


def aux_layer_ids(config: dict[str, Any]) -> tuple[int, ...] | None:
    """The draft's aux hidden-state layer ids from its config.json (SpecForge/vLLM or speculators keys)."""
    for holder in (config, config.get("eagle_config")):  # vLLM reads the top level first
        ids = holder.get("eagle_aux_hidden_state_layer_ids") if isinstance(holder, dict) else None
        if isinstance(ids, list) and ids and all(type(i) is int for i in ids):
            return tuple(ids)
    return None


def _layer_ids(draft: Path, given: tuple[int, ...] | None, target_layers: int) -> tuple[int, ...]:
    if given:
        return given
    config = (
        json.loads((draft / "config.json").read_text(encoding="utf-8")) if (draft / "config.json").is_file() else {}
    )
    found = aux_layer_ids(config)
    if found:
        return found
    # vLLM's default for Llama-family targets when the draft names none
    return (2, target_layers // 2, target_layers - 3)


def capture(
    target: str | Path,
    draft: str | Path,
    out: str | Path,
    *,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    max_tokens: int = 96,
    top_k: int = DEFAULT_TOP_K,
    layer_ids: tuple[int, ...] | None = None,
    num_speculative_tokens: int = 3,
) -> CaptureSummary:
    """Capture draft inputs from ``target`` (a transformers model directory) for the draft in ``draft``:
    ``max_tokens`` of greedy continuation a prompt, as an engine generating ``max_tokens`` with
    ``num_speculative_tokens`` drafted a step sees them."""
    try:
        import transformers
    except ImportError:
        raise InputError(
            "capture needs transformers to run the target", hint="pip install 'eaglequant[capture]' (or transformers)"
        ) from None
    import torch

    from eaglequant.acceptance.prompts import read_prompts

    target_path, draft_path, out_path = Path(target), Path(draft), _output(out)
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(target_path))
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(str(target_path), dtype=torch.float32)
    except (OSError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(words(given("target", str(target_path)), f": transformers cannot load it ({why})")) from None
    model.eval()
    ids = _layer_ids(draft_path, layer_ids, int(model.config.num_hidden_layers))
    records = []
    with torch.no_grad():
        for prompt in prompt_list:
            tokens = tokenizer(prompt, return_tensors="pt").input_ids[0]
            # k - 1 tokens past the engine's budget: its last draft, with fewer than max_tokens emitted, still
            # proposes k tokens and the target judges each
            sequence = _greedy(model, tokens, max_tokens + num_speculative_tokens - 1)
            record = _record(model, sequence, ids, top_k, len(tokens))
            records.append({**record, "max_new_tokens": max_tokens})
    metadata = {"target": str(target_path), "decoding": "greedy"}
    return write_capture(records, out_path, ids, prompts_from, metadata)


def _greedy(model: Any, tokens: Any, count: int) -> Any:
    """The prompt and ``count`` tokens of the target's arg-max, with nothing else in the loop (no stopping at
    end-of-text, no logits processors, no generation_config): what an engine's greedy decoding emits with
    ``ignore_eos``."""
    import torch

    output = model(tokens[None], use_cache=True)
    generated = [int(output.logits[0, -1].argmax())]
    for _ in range(count - 1):
        output = model(torch.tensor([[generated[-1]]]), past_key_values=output.past_key_values, use_cache=True)
        generated.append(int(output.logits[0, -1].argmax()))
    return torch.cat((tokens, torch.tensor(generated, dtype=tokens.dtype)))


def capture_from_specforge(
    directory: str | Path,
    out: str | Path,
    *,
    target: str | Path | None = None,
    top_k: int = DEFAULT_TOP_K,
    layer_ids: tuple[int, ...] = (),
) -> CaptureSummary:
    """Read SpecForge's offline hidden-state files into a capture file (see :mod:`.trainer_files`)."""
    from eaglequant.acceptance.trainer_files import read_specforge, target_lm_head

    out_path = _output(out)
    lm_head = None if target is None else target_lm_head(Path(target))
    records = read_specforge(Path(directory), lm_head, top_k)
    reference = "the target's lm_head" if lm_head is not None else "the dataset's next token"
    metadata = {"trainer": "specforge", "text": "dataset (teacher-forced)", "reference": reference}
    return write_capture(records, out_path, layer_ids, str(directory), metadata)


def _output(out: str | Path) -> Path:
    out_path = Path(out)
    if out_path.suffix != ".safetensors":
        raise InputError(f"{out_path}: the output must be a .safetensors file", hint="e.g. captured.safetensors")
    return out_path


def write_capture(
    records: list[dict[str, Any]], out_path: Path, ids: tuple[int, ...], origin: str, metadata: dict[str, str]
) -> CaptureSummary:
    from safetensors.torch import save_file

    tensors = _stack(records)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(f".{out_path.name}.partial")
    save_file(tensors, str(partial), metadata={**metadata, "aux_layer_ids": json.dumps(list(ids))})
    partial.replace(out_path)
    lengths, starts = tensors["lengths"], tensors["continuation_start"]
    return CaptureSummary(out_path, len(records), int(lengths.sum()), int((lengths - starts).sum()), ids, origin)


def _record(model: Any, sequence: Any, ids: tuple[int, ...], top_k: int, prompt_length: int) -> dict[str, Any]:
    import torch

    output = model(sequence[None], output_hidden_states=True)
    states = output.hidden_states
    if max(ids) >= len(states):
        raise InputError(f"aux layer id {max(ids)} is past the target's {len(states) - 1} layers")
    aux = torch.cat([states[i][0] for i in ids], -1)  # [L, n * H]
    probs = torch.softmax(output.logits[0].to(torch.float32), -1)  # [L, V]: after token l
    top = probs.topk(top_k, -1)
    return {
        "hidden_states": aux[:-1],
        "input_ids": sequence[1:],
        "target_top_ids": top.indices[1:],
        "target_top_probs": top.values[1:],
        "continuation_start": prompt_length - 1,
    }


def _stack(records: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    longest = max(len(r["input_ids"]) for r in records)

    def padded(key: str, dtype: torch.dtype) -> torch.Tensor:
        rows = []
        for r in records:
            value = r[key].to(dtype)
            pad = [0, 0] * (value.dim() - 1) + [0, longest - len(value)]
            rows.append(torch.nn.functional.pad(value, pad))
        return torch.stack(rows).contiguous()

    return {
        "hidden_states": padded("hidden_states", torch.float32),
        "input_ids": padded("input_ids", torch.int64),
        "target_top_ids": padded("target_top_ids", torch.int64),
        "target_top_probs": padded("target_top_probs", torch.float32),
        "lengths": torch.tensor([len(r["input_ids"]) for r in records], dtype=torch.int64),
        "continuation_start": torch.tensor([r["continuation_start"] for r in records], dtype=torch.int64),
        # the tokens an engine generates a prompt (past them it stops drafting); -1: not limited (trainer files)
        "max_new_tokens": torch.tensor([r.get("max_new_tokens", -1) for r in records], dtype=torch.int64),
    }
