"""Draft inputs captured by vLLM serving the target: its greedy continuation, the aux hidden states from its own
``extract_hidden_states`` method, and its top-K next-token probabilities.

Run in vLLM's interpreter as ``python -m <package>.vllm_capture JOB.json OUT.json`` (it imports vLLM, never
eaglequant). For each prompt, one at a time:

1. the target continues it greedily (``ignore_eos``), as an engine generating ``max_tokens`` does;
2. the prompt and that continuation are sent again as one prompt for one more token, with ``prompt_logprobs``:
   vLLM gives the target's top-K log-probabilities at every position (and the sampled token's at the end), and
   its ``extract_hidden_states`` method, through the hidden-states connector, writes the aux layers' states of
   every position of that prefill (``hidden_states`` [T, n_layers, H], ``token_ids`` [T]);
3. one sequence file is written into the job's ``spill`` directory, in the capture layout (position t reads the
   aux states at t and the token at t + 1; its reference is the distribution after that token), and the
   connector's files are deleted: memory and disk do not grow with the number of prompts beyond one sequence.

The connector is vLLM's stock ``ExampleHiddenStatesConnector`` where CUDA is present, else the synchronous
subclass in :mod:`.hidden_states_connector` (the stock one pins host memory and copies on a CUDA stream).
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DRAIN_STEPS = 64  # engine steps a finished request's file may take to appear


def connector_config(storage: str) -> dict[str, Any]:
    import torch

    config: dict[str, Any] = {
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": storage},
    }
    if torch.cuda.is_available():
        return {**config, "kv_connector": "ExampleHiddenStatesConnector"}
    package = __package__ or __name__.rpartition(".")[0]  # run with -m: __name__ is __main__
    return {
        **config,
        "kv_connector": "SynchronousHiddenStatesConnector",
        "kv_connector_module_path": f"{package}.hidden_states_connector",
    }


def build_engine(job: dict[str, Any], storage: str) -> Any:
    from vllm import LLM

    speculative = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(job["layer_ids"])}},
    }
    settings: dict[str, Any] = {
        "model": job["target"],
        "dtype": job.get("dtype", "bfloat16"),
        "max_model_len": int(job["max_model_len"]),
        "enforce_eager": True,
        "seed": 0,
        "max_num_seqs": 1,
        # prompt_logprobs and a prefix served from the cache do not mix; every prefill computes its states
        "enable_prefix_caching": False,
        "tensor_parallel_size": int(job.get("tensor_parallel_size", 1)),
        "gpu_memory_utilization": float(job.get("memory_utilization", 0.1)),
        "speculative_config": speculative,
        "kv_transfer_config": connector_config(storage),
    }
    return LLM(**{**settings, **job.get("engine_args", {})})


def top_k(entries: dict[int, Any], k: int) -> tuple[list[int], list[float]]:
    """The ``k`` most likely tokens of one position's logprobs (vLLM adds the prompt's own token beside them)."""
    ranked = sorted(entries.items(), key=lambda item: -item[1].logprob)[:k]
    return [token for token, _ in ranked], [math.exp(entry.logprob) for _, entry in ranked]


def hidden_states_file(output: Any) -> str:
    params = getattr(output, "kv_transfer_params", None) or {}
    path = params.get("hidden_states_path")
    if not path:
        raise RuntimeError("the hidden-states connector returned no file for the request")
    return str(path)


def await_hidden_states(llm: Any, path: str) -> dict[str, Any]:
    """The connector's file for a finished request. The connector writes it in the engine step after the request
    finished (``get_finished``), which the offline engine takes only when stepped: step it until the file exists,
    then read it under the connector's lock (the stock connector finishes the write in a thread)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import load_hidden_states

    for _ in range(DRAIN_STEPS):
        if os.path.exists(path):
            return load_hidden_states(path)
        llm.llm_engine.step()
    raise RuntimeError(f"the hidden-states connector wrote no {path} in {DRAIN_STEPS} engine steps")


def read_and_remove(llm: Any, path: str) -> dict[str, Any]:
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import cleanup_hidden_states

    data = await_hidden_states(llm, path)
    cleanup_hidden_states(path)
    return data


def capture_one(llm: Any, prompt: str, job: dict[str, Any]) -> dict[str, Any]:
    """One prompt's sequence record (tensors) in the capture layout."""
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    k = int(job["top_k"])
    generate = SamplingParams(temperature=0.0, max_tokens=int(job["generated_tokens"]), ignore_eos=True)
    first = llm.generate([prompt], generate, use_tqdm=False)[0]
    read_and_remove(llm, hidden_states_file(first))  # the generation's own file: the prefill below has every position
    prompt_ids = list(first.prompt_token_ids)
    sequence = prompt_ids + list(first.outputs[0].token_ids)
    score = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=k, logprobs=k, ignore_eos=True)
    second = llm.generate([TokensPrompt(prompt_token_ids=sequence)], score, use_tqdm=False)[0]
    states = read_and_remove(llm, hidden_states_file(second))
    if states["token_ids"].tolist() != sequence:
        raise RuntimeError("the connector's token_ids differ from the prompt sent")
    # after token l for l = 1..T-1: the prompt logprobs of positions 2..T-1, then the one generated position's
    after = [*second.prompt_logprobs[2:], second.outputs[0].logprobs[0]]
    ranked = [top_k(entries, k) for entries in after]
    hidden = states["hidden_states"]
    return {
        "hidden_states": hidden[:-1].reshape(len(sequence) - 1, -1).contiguous(),  # in the served dtype
        "input_ids": torch.tensor(sequence[1:], dtype=torch.int64),
        "target_top_ids": torch.tensor([ids for ids, _ in ranked], dtype=torch.int64),
        "target_top_probs": torch.tensor([probs for _, probs in ranked], dtype=torch.float32),
        "continuation_start": torch.tensor(len(prompt_ids) - 1, dtype=torch.int64),
        "max_new_tokens": torch.tensor(int(job["max_new_tokens"]), dtype=torch.int64),
    }


def run(job: dict[str, Any]) -> dict[str, Any]:
    import vllm
    from safetensors.torch import save_file

    spill = Path(job["spill"])
    storage = spill / "connector"
    storage.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    llm = build_engine(job, str(storage))
    loaded_s = time.monotonic() - started
    for index, prompt in enumerate(job["prompts"]):
        record = capture_one(llm, prompt, job)
        part = spill / f"sequence-{index:06d}.safetensors"
        save_file(record, str(part.with_suffix(".partial")))
        part.with_suffix(".partial").replace(part)
    return {
        "engine": "vllm",
        "version": vllm.__version__,
        "connector": connector_config(str(storage))["kv_connector"],
        "load_seconds": round(loaded_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "sequences": len(job["prompts"]),
    }


if __name__ == "__main__":
    from .common import run_job_file

    sys.exit(run_job_file(sys.argv, run))
