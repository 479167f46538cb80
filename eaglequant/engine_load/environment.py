"""The environment an engine process runs in (a probe, a launched server)."""

from __future__ import annotations

import os


def engine_environment(ranks: int = 1) -> dict[str, str]:
    """The environment an engine process runs in: this one, less what would change which engine kernels run (under
    TRITON_INTERPRET=1 an engine's GPU-only Triton kernels would run on CPU, where they otherwise cannot), with
    unbuffered output and, for ``ranks`` > 1, vLLM's CPU thread binding (:func:`cpu_rank_binding`)."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return {**env, **cpu_rank_binding(ranks, env)}


def cpu_rank_binding(ranks: int, env: dict[str, str]) -> dict[str, str]:
    """vLLM's CPU build runs tensor-parallel ranks only with each rank's OpenMP threads bound to cores of its own,
    which it derives from NUMA nodes and refuses to guess on a one-node machine ("Not enough allowed NUMA nodes to
    bind threads of 2 local CPUWorkers"). Where the user set no ``VLLM_CPU_OMP_THREADS_BIND``, the allowed cores are
    split evenly (``0-7|8-15`` as ``0,1,..|8,9,..``). One rank's threads get every allowed core but the last, which is
    left to the engine's own Python thread (scheduling, sampling, the drafting loop): with its threads on every core
    that thread waits on them, and a decode's rate moved by 15% from one process to the next on 2 cores, against 2%
    with one core left. CUDA builds never read it."""
    if env.get("VLLM_CPU_OMP_THREADS_BIND"):
        return {}
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if ranks == 1:
        return {} if len(cores) < 2 else {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cores[:-1]))}
    share = len(cores) // ranks
    if share < 1:
        return {}  # fewer cores than ranks: vLLM's own refusal says so
    groups = [cores[i * share : (i + 1) * share] for i in range(ranks)]
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(",".join(map(str, group)) for group in groups)}


__all__ = ["cpu_rank_binding", "engine_environment"]
