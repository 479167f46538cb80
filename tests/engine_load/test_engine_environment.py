"""The environment an engine process runs in: vLLM's CPU thread binding for tensor-parallel ranks, set only where the
user set none, and no TRITON_INTERPRET (which would run an engine's GPU-only kernels on CPU)."""

from __future__ import annotations

import os

import pytest

from eaglequant.engine_load.environment import cpu_rank_binding, engine_environment


def test_ranks_get_the_allowed_cores_split_evenly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4, 5})
    assert cpu_rank_binding(2, {}) == {"VLLM_CPU_OMP_THREADS_BIND": "0,1,2|3,4,5"}
    assert cpu_rank_binding(4, {}) == {"VLLM_CPU_OMP_THREADS_BIND": "0|1|2|3"}


def test_one_rank_leaves_the_last_core_to_the_engines_python_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    assert cpu_rank_binding(1, {}) == {"VLLM_CPU_OMP_THREADS_BIND": "0,1,2"}
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {5})
    assert cpu_rank_binding(1, {}) == {}  # one core: nothing to leave


def test_a_users_binding_or_too_few_cores_leave_it_to_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert cpu_rank_binding(1, {"VLLM_CPU_OMP_THREADS_BIND": "all"}) == {}
    assert cpu_rank_binding(2, {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}) == {}
    assert cpu_rank_binding(3, {}) == {}


def test_the_engine_environment_drops_triton_interpret_and_binds_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    env = engine_environment(2)
    assert "TRITON_INTERPRET" not in env and env["PYTHONUNBUFFERED"] == "1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert engine_environment(1)["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_a_job_without_a_result_says_why_in_one_line() -> None:
    import sys
    from pathlib import Path

    from eaglequant.engine_load import EngineJobError, run_engine_job

    with pytest.raises(
        EngineJobError, match=r"exited 1 without an answer: .*No module named engine_probes\.no_such_probe"
    ):
        run_engine_job(Path(sys.executable), "no_such_probe", {}, 60)


def test_an_inexact_int8_kernel_on_this_machine_widens_only_the_int8_layers_bound() -> None:
    from eaglequant.engine_load.platform import kernel_bound

    inexact = 0.13
    int8 = "QuarkLinearMethod/scheme QuarkW8A8Int8"
    widened, why = kernel_bound(int8, 0.045, inexact, "vLLM 0.32.0")
    assert widened == pytest.approx(0.175) and why is not None and why.code == "inexact-int8-gemm"
    assert kernel_bound("QuarkLinearMethod/scheme QuarkW8A8Fp8", 0.045, inexact, "vLLM 0.32.0") == (0.045, None)
    assert kernel_bound(int8, 0.045, 0.003, "vLLM 0.32.0") == (0.045, None)  # exact sums
    assert kernel_bound(int8, 0.045, None, "vLLM 0.32.0") == (0.045, None)  # not measured (CUDA, SGLang)
