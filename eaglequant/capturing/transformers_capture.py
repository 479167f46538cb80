"""Captured draft inputs with the target's choices: what ``--calib``, ``verify --inputs`` and ``--counts`` read.

The target continues each prompt greedily (what an engine's greedy speculative decoding reproduces), then one
forward over prompt + continuation gives, at every position, the hidden states at the draft's aux layer ids
(vLLM's numbering: layer id i is the input of decoder layer i, transformers' ``hidden_states[i]``) and the
target's next-token distribution. Three producers write the same file (:mod:`eaglequant.draft.capture_file`): a
transformers target run here (:func:`capture`), the engine serving the target (:func:`capture_with_engine`, at any
tensor-parallel size) and the hidden-state files trainers and vLLM's connector already wrote
(:func:`capture_from_specforge`, :func:`capture_from_hidden_states`).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from eaglequant.capturing.routing import router_tap, routing_locality
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.errors import InputError, given, words
from eaglequant.common.progress import NoSteps, Steps, Tally
from eaglequant.draft.capture_file import CaptureSummary, CaptureWriter, aux_layer_ids, made_for, output_path
from eaglequant.draft.capture_routing import METADATA_KEY

DEFAULT_TOP_K = 8
DEFAULT_AUX_LAYERS = 3  # vLLM's default aux layers, where a draft names none

__all__ = [
    "CaptureSummary",
    "aux_layer_ids",
    "capture",
    "capture_from_hidden_states",
    "capture_from_specforge",
]


def check_draft(draft: Path) -> None:
    """Refuse a ``draft`` that is not an EAGLE-3 head (the target passed as the draft, say) before any model is
    loaded: its tensors are read by their headers, as ``inspect`` reads them."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.common.errors import LayoutError
    from eaglequant.layouts.detect import describe_head

    if not draft.is_dir():
        raise InputError(
            words(given("draft", str(draft)), ": no such directory"), hint="give the draft head's directory"
        )
    try:
        with Checkpoint.open(draft) as checkpoint:
            describe_head(checkpoint)
    except LayoutError as exc:
        found = exc.message.split("; found ", 1)[-1] if "; found " in exc.message else exc.message
        raise InputError(
            words(given("draft", str(draft)), f": not an EAGLE-3 head (its tensors: {found})"),
            hint="give the draft head's directory as --draft, and the model it drafts for as --target",
        ) from None


def draft_layer_ids(draft: Path, given_ids: tuple[int, ...] | None, target_layers: int) -> tuple[int, ...]:
    """The aux layer ids to capture: given, else the draft's config's, else vLLM's default for Llama-family
    targets; each must name a layer of the target (0 .. its depth; the depth itself is its last layer's output)."""
    ids = given_ids or _configured_ids(draft) or (2, target_layers // 2, target_layers - 3)
    beyond = [i for i in ids if not 0 <= i <= target_layers]
    if beyond:
        raise InputError(
            words(
                given("draft", str(draft)), f": aux layer id {beyond[0]} is beyond the target's {target_layers} layers"
            ),
            hint="capture with the target this draft was trained for (its config's eagle_aux_hidden_state_layer_ids)",
        )
    return tuple(ids)


def _configured_ids(draft: Path) -> tuple[int, ...] | None:
    from eaglequant.checkpoint.reader import load_json_object

    config_file = draft / "config.json"
    return aux_layer_ids(load_json_object(config_file, "config.json")) if config_file.is_file() else None


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
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    steps: Steps | None = None,
) -> CaptureSummary:
    """Capture draft inputs from ``target`` (a transformers model directory) for the draft in ``draft``:
    ``max_tokens`` of greedy continuation a prompt, as an engine generating ``max_tokens`` with
    ``draft_tokens`` drafted a step sees them; ``steps`` is told of each prompt captured."""
    try:
        import transformers
    except ImportError:
        import shlex
        import sys

        pip = f"{shlex.quote(sys.executable)} -m pip install"  # this interpreter's, not whichever pip is first
        raise InputError(
            "capture needs transformers to run the target", hint=f"{pip} 'eaglequant[capture]' (or transformers)"
        ) from None
    import torch

    from eaglequant.measurement.prompts import read_prompts

    target_path, draft_path = Path(target), Path(draft)
    output_path(out)
    check_draft(draft_path)
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(target_path))
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(str(target_path), dtype=torch.float32)
    except (OSError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(words(given("target", str(target_path)), f": transformers cannot load it ({why})")) from None
    model.eval()
    ids = draft_layer_ids(draft_path, layer_ids, int(model.config.num_hidden_layers))
    tap, routing_note = router_tap(model)
    shown = steps or NoSteps()
    tally = Tally(shown, len(prompt_list))
    try:
        with CaptureWriter(out) as writer, torch.no_grad():
            for index, prompt in enumerate(prompt_list, start=1):
                tokens = tokenizer(prompt, return_tensors="pt").input_ids[0]
                # k - 1 tokens past the engine's budget: its last draft, with fewer than max_tokens emitted, still
                # proposes k tokens and the target judges each
                sequence = _greedy(model, tokens, max_tokens + draft_tokens - 1)
                with tap.listening() if tap else nullcontext():
                    record = _record(model, sequence, ids, top_k, len(tokens))
                if tap:
                    tap.counted(len(tokens))  # the generated tokens: those a decode forward runs
                writer.add({**record, "max_new_tokens": max_tokens})
                tally.finished(f"prompt {index}/{len(prompt_list)} (transformers)")
            known = made_for(
                target=target_path,
                target_layers=int(model.config.num_hidden_layers),
                target_vocab_size=int(model.config.vocab_size),
                prompts=prompt_list,
            )
            routing = {METADATA_KEY: tap.counts.to_metadata()} if tap else {}
            summary = writer.finish(ids, prompts_from, {**known, "decoding": "greedy", **routing})
    finally:
        shown.stop()
    measured = routing_locality(tap.counts, f"capture ({summary.path.name})") if tap else None
    return replace(summary, routing_locality=measured, routing_note=routing_note)


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


def _record(model: Any, sequence: Any, ids: tuple[int, ...], top_k: int, prompt_length: int) -> dict[str, Any]:
    import torch

    output = model(sequence[None], output_hidden_states=True)
    states = output.hidden_states
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


def capture_from_specforge(
    directory: str | Path,
    out: str | Path,
    *,
    target: str | Path | None = None,
    top_k: int = DEFAULT_TOP_K,
    layer_ids: tuple[int, ...] = (),
) -> CaptureSummary:
    """Read SpecForge's offline hidden-state files into a capture file (see :mod:`.trainer_files`)."""
    from eaglequant.capturing.trainer_files import read_specforge
    from eaglequant.draft.connector_files import target_lm_head

    output_path(out)
    lm_head = None if target is None else target_lm_head(Path(target))
    reference = "the target's lm_head" if lm_head is not None else "the dataset's next token"
    metadata = {"trainer": "specforge", "text": "dataset (teacher-forced)", "reference": reference}
    metadata.update(_target_known(target, None if lm_head is None else int(lm_head.shape[0])))
    with CaptureWriter(out) as writer:
        writer.add_all(read_specforge(Path(directory), lm_head, top_k))
        return writer.finish(layer_ids, str(directory), metadata)


def capture_from_hidden_states(
    directory: str | Path,
    out: str | Path,
    *,
    draft: str | Path | None = None,
    target: str | Path | None = None,
    top_k: int = DEFAULT_TOP_K,
) -> CaptureSummary:
    """Read the files vLLM's hidden-states connector wrote into a capture file (see
    :mod:`eaglequant.draft.connector_files`). ``draft`` says how many aux layers it reads (default: its config's
    layer ids; without a draft, 3, vLLM's default); ``target``: its final norm and ``lm_head`` give the target's
    choices from a last layer the files carry."""
    from eaglequant.draft.connector_files import read_hidden_states, target_output_head

    output_path(out)
    ids = _configured_ids(Path(draft)) if draft is not None else None
    aux_count = len(ids) if ids else DEFAULT_AUX_LAYERS
    head = None if target is None else target_output_head(Path(target))
    reference = "the target's final norm and lm_head" if head is not None else "the files' next token"
    metadata = {"hidden_states_from": "vllm connector", "text": "the files' (teacher-forced)", "reference": reference}
    metadata.update(_target_known(target, None if head is None else int(head.lm_head.shape[0])))
    with CaptureWriter(out) as writer:
        writer.add_all(read_hidden_states(Path(directory), aux_count, head, top_k))
        return writer.finish(ids or (), str(directory), metadata)


def _target_known(target: str | Path | None, vocab_size: int | None) -> dict[str, str]:
    """What a trainer's or the connector's files record of their target, where it was given: its name, its layer
    count (config.json) and its vocabulary (its lm_head's rows). The prompts are the files' text: not recorded."""
    if target is None:
        return {}
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.engines.target import layer_count

    config_file = Path(target) / "config.json"
    layers = layer_count(load_json_object(config_file, "config.json"), str(config_file))
    return made_for(target=target, target_layers=layers, target_vocab_size=vocab_size)
