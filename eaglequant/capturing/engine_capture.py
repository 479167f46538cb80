"""Capture through the engine that serves the target: vLLM's greedy continuation, its own aux hidden states
(``extract_hidden_states`` with a hidden-states connector) and its ``prompt_logprobs``, at whatever
tensor-parallel size the target needs. The probe (``engine_load/probes/vllm_capture.py``) writes one sequence
file at a time into the :class:`~eaglequant.draft.capture_file.CaptureWriter`'s parts; this side checks the request
first and assembles the capture file after. Progress is read from those parts as they land: one a prompt, with
no channel to the engine's process beyond the files it already writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.capturing.transformers_capture import DEFAULT_TOP_K, check_draft, draft_layer_ids
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.engine_failure import EngineFailure
from eaglequant.common.errors import InputError, given, suggested, words
from eaglequant.common.progress import NoSteps, Steps, Tally
from eaglequant.draft.capture_file import CaptureSummary, CaptureWriter, made_for, output_path
from eaglequant.measurement.engine_args import model_length

CAPTURE_TIMEOUT_S = 6 * 3600
WATCH_S = 1.0  # how often the parts the engine writes are counted for progress
DTYPES = ("bfloat16", "float16", "float32")
# engine arguments the capture sets for its hidden-state extraction, beside those every run sets (engine_args.py)
CAPTURE_KEYS = {
    key: f"capture sets {key} itself (its hidden-state extraction)"
    for key in ("speculative_config", "kv_transfer_config", "enable_prefix_caching")
}


class CaptureRunError(EngineFailure):
    """The engine could not run the capture at all."""


@dataclass(frozen=True)
class EngineCapture:
    """How the engine serves the target for a capture: its interpreter and its arguments."""

    python: Path
    dtype: str = "bfloat16"
    tensor_parallel_size: int = 1
    engine_args: Mapping[str, Any] = field(default_factory=dict)


def capture_with_engine(
    target: str | Path,
    draft: str | Path,
    out: str | Path,
    engine: EngineCapture,
    *,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    max_tokens: int = 96,
    top_k: int = DEFAULT_TOP_K,
    layer_ids: tuple[int, ...] | None = None,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    steps: Steps | None = None,
) -> CaptureSummary:
    """The capture :func:`~.transformers_capture.capture` writes, with vLLM serving ``target`` (any model vLLM serves:
    quantized, MoE, MLA, across ``engine.tensor_parallel_size`` devices); ``steps`` is told of each prompt as its
    sequence file lands."""
    from eaglequant.measurement.prompts import read_prompts

    target_path, draft_path = Path(target), Path(draft)
    output_path(out)
    check_draft(draft_path)
    config = _target_config(target_path)
    ids = draft_layer_ids(draft_path, layer_ids, _depth(config, target_path))
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    generated = max_tokens + draft_tokens - 1  # as the transformers capture: the last draft is judged
    job = {
        "target": str(target_path.resolve()),
        "layer_ids": list(ids),
        "prompts": prompt_list,
        "generated_tokens": generated,
        "max_new_tokens": max_tokens,
        "top_k": top_k,
        "dtype": engine.dtype,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "engine_args": dict(engine.engine_args),
        "max_model_len": model_length(target_path, prompt_list, generated),
    }
    with CaptureWriter(out) as writer:
        with _watched(writer.parts, len(prompt_list), steps or NoSteps()):
            result = _run(engine.python, {**job, "spill": str(writer.parts.resolve())})
        known = made_for(
            target=target_path,
            target_layers=_depth(config, target_path),
            target_vocab_size=_vocab_size(config),
            prompts=prompt_list,
        )
        metadata = {
            **known,
            "decoding": "greedy",
            "engine": f"vllm {result['version']}",
            "dtype": engine.dtype,
            "tensor_parallel_size": str(engine.tensor_parallel_size),
            "hidden_states_from": str(result["connector"]),
        }
        return writer.finish(ids, prompts_from, metadata)


@contextmanager
def _watched(parts: Path, prompts: int, steps: Steps) -> Iterator[None]:
    """While the block runs, count the sequence files the engine's process writes into ``parts`` (one a prompt) and
    tell ``steps`` of each new one."""
    tally = Tally(steps, prompts)
    done = threading.Event()

    def count() -> None:
        while True:
            finished = done.wait(WATCH_S)
            landed = len(list(parts.glob("sequence-*.safetensors"))) if parts.is_dir() else 0
            while tally.done < min(landed, prompts):
                tally.finished(f"prompt {tally.done + 1}/{prompts} (vLLM)")
            if finished:
                return

    watcher = threading.Thread(target=count, name="capture-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        steps.stop()


def _target_config(target: Path) -> dict[str, Any]:
    from eaglequant.checkpoint.reader import load_json_object

    if not (target / "config.json").is_file():
        what = "does not exist" if not target.exists() else "has no config.json"
        raise InputError(words(given("target", str(target)), f": {what}"), hint="give the target model's directory")
    return load_json_object(target / "config.json", "config.json")


def _depth(config: dict[str, Any], target: Path) -> int:
    from eaglequant.engines.target import layer_count

    return layer_count(config, f"{target}/config.json")


def _vocab_size(config: dict[str, Any]) -> int | None:
    """The target config's ``vocab_size`` (its ``text_config`` first), None where it names none."""
    from eaglequant.engines.served_length import text_config

    value = text_config(config).get("vocab_size", config.get("vocab_size"))
    return value if type(value) is int and value > 0 else None


def _run(interpreter: Path, job: dict[str, Any]) -> dict[str, Any]:
    from eaglequant.engine_load import EngineJobError, run_engine_job

    ranks = int(job["engine_args"].get("tensor_parallel_size", job["tensor_parallel_size"]))
    try:
        return run_engine_job(interpreter, "vllm_capture", job, CAPTURE_TIMEOUT_S, ranks)
    except EngineJobError as error:
        raise CaptureRunError(f"vLLM could not capture from {job['target']}: {error.message}") from None


def capture_through(
    engine: str,
    target: str | Path,
    draft: str | Path,
    out: str | Path,
    *,
    dtype: str = "bfloat16",
    tensor_parallel_size: int = 1,
    engine_args: Mapping[str, Any] | Sequence[str] = (),
    engine_python: str | Path | None = None,
    **settings: Any,
) -> CaptureSummary:
    """:func:`capture_with_engine` with the engine named (``vllm``), its interpreter found as ``accept`` finds it,
    and ``KEY=VALUE`` engine arguments parsed; ``settings`` are the capture's (prompts, max_tokens, top_k...)."""
    from eaglequant.engine_load import engine_python as find_engine_python
    from eaglequant.engines import CAPTURING_ENGINES
    from eaglequant.measurement.engine_args import engine_arguments

    if engine not in CAPTURING_ENGINES:
        raise InputError(
            words(given("engine", engine), f": capture runs {', '.join(CAPTURING_ENGINES)}"),
            hint=words("use ", suggested("engine", CAPTURING_ENGINES[0])),
        )
    if dtype not in DTYPES:
        raise InputError(words(given("dtype", dtype), f": not one of {', '.join(DTYPES)}"), hint="use bfloat16")
    arguments = engine_arguments(engine_args, tensor_parallel_size, CAPTURE_KEYS)
    chosen = EngineCapture(find_engine_python(engine, engine_python), dtype, tensor_parallel_size, arguments)
    return capture_with_engine(target, draft, out, chosen, **settings)
