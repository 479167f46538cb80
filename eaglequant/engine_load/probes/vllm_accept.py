"""Speculative decoding with vLLM's own engine: acceptance counters per prompt, for one target and one draft.

Run in vLLM's interpreter as ``python -m <package>.vllm_accept JOB.json OUT.json`` (it imports vLLM, never
eaglequant). JOB holds the target, the draft (null: the target alone, the reference for greedy output), the
number of speculative tokens, the prompts, the decoding modes and the engine arguments (``LLM(...)``'s
keywords: eaglequant's settings with the user's ``--engine-arg`` and ``--tensor-parallel-size``). For each mode
every prompt is generated on its own and vLLM's spec-decode counters (``LLM.get_metrics()``: drafts, draft
tokens, accepted tokens, accepted tokens per position) are read before and after it, so each prompt's figures
are the engine's own. OUT gets the engine's version, its speculative configuration as it resolved it, and per
mode and prompt the counters and the generated token ids.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# One process: the engine core runs in this interpreter (no fork/spawn of a second one, which would re-import
# this module), and vLLM's logging stays on stderr.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def counters(llm: Any, k: int) -> dict[str, Any]:
    found: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_position": [0] * k}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            found[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION:
            values = [int(v) for v in metric.values]
            found["accepted_per_position"] = [
                a + b for a, b in zip(found["accepted_per_position"], values, strict=False)
            ]
    return found


def difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {
        key: [a - b for a, b in zip(value, before[key], strict=True)]
        if isinstance(value, list)
        else value - before[key]
        for key, value in after.items()
    }


def top2_gap(logprobs: dict[int, Any]) -> float | None:
    """How far the chosen token's log-probability leads the runner-up's (a near-tie, which arithmetic that
    depends on the batch's shape can flip, has a gap near 0)."""
    values = sorted((entry.logprob for entry in logprobs.values()), reverse=True)
    return round(values[0] - values[1], 6) if len(values) > 1 else None


def run(job: dict[str, Any]) -> dict[str, Any]:
    import vllm
    from vllm import LLM, SamplingParams

    k = int(job["draft_tokens"])
    speculative = None
    if job.get("draft"):
        speculative = {"method": "eagle3", "model": job["draft"], "num_speculative_tokens": k}
    started = time.monotonic()
    # engine_args: eaglequant's settings (dtype, seed, max_model_len, ...) with the user's --engine-arg over its
    # defaults; the counters need the stats logged
    llm = LLM(model=job["target"], speculative_config=speculative, disable_log_stats=False, **job["engine_args"])
    loaded_s = time.monotonic() - started
    config = llm.llm_engine.vllm_config.speculative_config
    resolved = None
    if config is not None:
        resolved = {
            "method": str(getattr(config, "method", None)),
            "num_speculative_tokens": getattr(config, "num_speculative_tokens", None),
            "draft_sample_method": str(getattr(config, "draft_sample_method", "greedy")),
        }
    modes = []
    for mode in job["modes"]:
        prompts = []
        for index, prompt in enumerate(job["prompts"]):
            greedy = float(mode["temperature"]) == 0.0
            params = SamplingParams(
                temperature=float(mode["temperature"]),
                max_tokens=int(job["max_tokens"]),
                ignore_eos=True,
                seed=int(mode.get("seed", 0)) + index,
                logprobs=2 if greedy else None,
            )
            before = counters(llm, k)
            output = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
            figures = difference(counters(llm, k), before) if speculative else {}
            record = {**figures, "token_ids": list(output.token_ids)}
            if greedy and output.logprobs:
                record["top2_gaps"] = [top2_gap(position) for position in output.logprobs]
            prompts.append(record)
        modes.append({"name": mode["name"], "temperature": mode["temperature"], "prompts": prompts})
    return {
        "engine": "vllm",
        "version": vllm.__version__,
        "speculative_config": resolved,
        "load_seconds": round(loaded_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "modes": modes,
    }


if __name__ == "__main__":
    from .common import run_job_file

    sys.exit(run_job_file(sys.argv, run))
