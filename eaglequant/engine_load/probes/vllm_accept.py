"""Speculative decoding with vLLM's own engine: acceptance counters per prompt, for one target and one draft.

Run in vLLM's interpreter as ``python -m <package>.vllm_accept JOB.json OUT.json`` (it imports vLLM, never
eaglequant). JOB holds the target, the draft (null: the target alone, the reference for greedy output), the
number of speculative tokens (and, given, a k for each batch size: ``num_speculative_tokens_per_batch_size``), the
prompts, the decoding modes and the engine arguments (``LLM(...)``'s keywords: eaglequant's settings with the user's
``--engine-arg`` and ``--tensor-parallel-size``). For each mode
every prompt is generated on its own and vLLM's spec-decode counters (``LLM.get_metrics()``: drafts, draft
tokens, accepted tokens, accepted tokens per position) are read before and after it, so each prompt's figures
are the engine's own. OUT gets the engine's version, its speculative configuration as it resolved it, and per
mode and prompt the counters and the generated token ids, and each prompt's decode tokens and seconds: by the
engine core's own timestamps (``RequestOutput.metrics``, a ``RequestStateStats`` that the logged stats fill:
``last_token_ts - first_token_ts`` over the tokens after the prefill's first), or, where a run's outputs lack
them, by the wall time of the ``generate`` call over every generated token; OUT says which clock it used.
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


def engine_decode(output: Any, generated: int) -> tuple[int, float] | None:
    """The decode phase by the engine core's timestamps (None where the output carries none): the tokens after
    the prefill's first, and the seconds from the first token to the last."""
    stats = getattr(output, "metrics", None)
    first, last = getattr(stats, "first_token_ts", 0.0), getattr(stats, "last_token_ts", 0.0)
    if not isinstance(first, float) or not isinstance(last, float) or first <= 0 or last <= first or generated < 2:
        return None
    return generated - 1, last - first


def timed(records: list[dict[str, Any]], engine: list[tuple[int, float] | None], wall: list[float]) -> str:
    """Put each prompt's decode tokens and seconds into its record, by one clock for the whole run: the engine's
    where every prompt has its timestamps, else the wall time of each ``generate`` call over every token."""
    clock = "engine" if all(e is not None for e in engine) else "wall"
    for record, by_engine, seconds in zip(records, engine, wall, strict=True):
        tokens, spent = (
            by_engine if by_engine is not None and clock == "engine" else (len(record["token_ids"]), seconds)
        )
        record["decode_tokens"], record["decode_seconds"] = tokens, round(spent, 6)
    return clock


def concurrent_pass(llm: Any, job: dict[str, Any], k: int, concurrency: int, drafting: bool) -> dict[str, Any]:
    """Every prompt greedy with at most ``concurrency`` requests in the engine at once: ``concurrency`` added first,
    then the next as each one finishes (``LLMEngine.add_request`` and ``step``), as a client with that many
    connections feeds a server; each request's output tokens and latency (added to finished), the pass's wall
    time, and with a draft the spec-decode counters' change over the pass."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=int(job["max_tokens"]), ignore_eos=True)
    waiting = list(enumerate(job["prompts"]))
    count = len(waiting)
    in_flight: dict[str, tuple[int, float]] = {}
    named: dict[str, str] = {}  # the engine's id for a request, where it is not the one given, -> the one given
    tokens, latencies = [0] * count, [0.0] * count

    def submit() -> None:
        index, prompt = waiting.pop(0)
        request_id = f"c{concurrency}-{index}"
        in_flight[request_id] = (index, time.monotonic())
        named[str(engine.add_request(request_id, prompt, params) or request_id)] = request_id

    before = counters(llm, k)
    started = time.monotonic()
    while waiting and len(in_flight) < concurrency:
        submit()
    while in_flight:
        if not engine.has_unfinished_requests():
            raise RuntimeError(f"the engine finished without answering requests {sorted(in_flight)}")
        for output in engine.step():
            request_id = named.get(output.request_id, output.request_id)
            if not output.finished or request_id not in in_flight:
                continue
            index, sent = in_flight.pop(request_id)
            latencies[index] = round(time.monotonic() - sent, 6)
            tokens[index] = len(output.outputs[0].token_ids)
            if waiting:
                submit()
    wall = time.monotonic() - started
    figures = difference(counters(llm, k), before) if drafting else {}
    return {
        "concurrency": concurrency,
        "tokens": tokens,
        "latencies": latencies,
        "wall_seconds": round(wall, 6),
        "drafts": figures.get("drafts"),
        "accepted": figures.get("accepted"),
    }


def run(job: dict[str, Any]) -> dict[str, Any]:
    import vllm
    from vllm import LLM, SamplingParams

    k = int(job["draft_tokens"])
    speculative = None
    if job.get("draft"):
        speculative = {"method": "eagle3", "model": job["draft"], "num_speculative_tokens": k}
        if job.get("schedule"):  # a k for each batch size, each capped at k (vLLM's dynamic speculative decoding)
            speculative["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in job["schedule"]]
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
        schedule = getattr(config, "num_speculative_tokens_per_batch_size", None)
        if schedule:  # as vLLM resolved it: None where it dropped the schedule (data parallelism)
            resolved["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in schedule]
    # One untimed generation first: the first request of a process pays for allocations and warm-up that no later
    # one does, and would otherwise be timed into the first prompt's decode rate (the counters are read around
    # each timed prompt, so this one counts nowhere).
    warm_up = SamplingParams(temperature=0.0, max_tokens=int(job["max_tokens"]))
    llm.generate([job["prompts"][0]], warm_up, use_tqdm=False)
    modes = []
    for mode in job["modes"]:
        prompts: list[dict[str, Any]] = []
        engine_times: list[tuple[int, float] | None] = []
        wall_times: list[float] = []
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
            called = time.monotonic()
            answer = llm.generate([prompt], params, use_tqdm=False)[0]
            wall_times.append(time.monotonic() - called)
            output = answer.outputs[0]
            engine_times.append(engine_decode(answer, len(output.token_ids)))
            figures = difference(counters(llm, k), before) if speculative else {}
            record = {**figures, "token_ids": list(output.token_ids)}
            if greedy and output.logprobs:
                record["top2_gaps"] = [top2_gap(position) for position in output.logprobs]
            prompts.append(record)
        clock = timed(prompts, engine_times, wall_times)
        modes.append({"name": mode["name"], "temperature": mode["temperature"], "clock": clock, "prompts": prompts})
    concurrent = [concurrent_pass(llm, job, k, int(c), bool(speculative)) for c in job.get("concurrency", ())]
    return {
        "engine": "vllm",
        "version": vllm.__version__,
        "speculative_config": resolved,
        "load_seconds": round(loaded_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "modes": modes,
        "concurrent": concurrent,
    }


if __name__ == "__main__":
    from .common import run_job_file

    sys.exit(run_job_file(sys.argv, run))
