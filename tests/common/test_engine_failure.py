"""Issue 55, item 2: an engine run that fails says its root cause in the engine's own words, keeps the engine's whole
output where the user can read it, and exits with the engine-failure code (6), documented in docs/cli.md."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from eaglequant.common.engine_failure import EngineFailure, failure_line, first_error
from eaglequant.common.errors import EXIT_ENGINE_FAILED
from tests.conftest import ROOT

# What vLLM's multiprocess executor prints when a worker fails: the root cause in the worker, then the wrappers
WORKER_FAILED = """INFO 11-28 02:00:00 [core.py:93] Initializing a V1 LLM engine
(EngineCore pid=4242) ERROR 11-28 02:00:01 [multiproc_executor.py:585] WorkerProc failed to start.
(EngineCore pid=4242) Traceback (most recent call last):
(EngineCore pid=4242)   File "vllm/v1/executor/multiproc_executor.py", line 559, in worker_main
(EngineCore pid=4242) ValueError: No common block size for 128 (CPU_ATTN: [16, 32]; CPU_MLA: [16])
Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_root_cause_is_the_first_error_that_wraps_no_other() -> None:
    assert first_error(WORKER_FAILED) == (
        "(EngineCore pid=4242) ValueError: No common block size for 128 (CPU_ATTN: [16, 32]; CPU_MLA: [16])"
    )
    assert first_error("Exception: WorkerProc initialization failed. See stack trace for root cause.\n") == (
        "Exception: WorkerProc initialization failed. See stack trace for root cause."
    )  # only a wrapper: it is what there is
    assert first_error("INFO loading\nall fine\n") is None


def test_a_failure_line_names_the_cause_and_keeps_the_whole_output() -> None:
    wrapper = "Exception: WorkerProc initialization failed due to an exception. See stack trace for root cause."
    line = failure_line(WORKER_FAILED, "vllm_accept", wrapper)
    assert line.startswith("(EngineCore pid=4242) ValueError: No common block size for 128")
    kept = Path(line.rsplit("(the engine's whole output: ", 1)[1].rstrip(")"))
    assert kept.read_text() == WORKER_FAILED and kept.name.startswith("vllm_accept-")
    assert failure_line("", "x", "KeyError: 'model.fc'").startswith("KeyError: 'model.fc' (")  # its own error
    assert failure_line("python: No module named vllm\n", "x").startswith("python: No module named vllm (")


def test_an_engine_job_that_fails_in_a_worker_says_the_worker_s_error_with_exit_code_6(tmp_path: Path) -> None:
    from eaglequant.capturing.engine_capture import CaptureRunError
    from eaglequant.common.local_server import ServerStartError
    from eaglequant.engine_load import EngineJobError, EngineLoadError, run_engine_job
    from eaglequant.measurement.measure import AcceptanceRunError

    log = tmp_path / "engine.log"
    log.write_text(WORKER_FAILED)
    interpreter = tmp_path / "python"  # stands for the engine's interpreter: -m MODULE IN.json OUT.json
    interpreter.write_text(
        "#!/bin/sh\n"
        f"cat {log} >&2\n"
        'printf \'{"error": "Exception: WorkerProc initialization failed. See stack trace for root cause."}\' > "$4"\n'
    )
    interpreter.chmod(interpreter.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(EngineJobError, match=r"^\(EngineCore pid=4242\) ValueError: No common block size") as raised:
        run_engine_job(interpreter, "vllm_accept", {}, 60)
    assert raised.value.exit_code == EXIT_ENGINE_FAILED == 6 and "the engine's whole output: " in raised.value.message
    for failure in (EngineJobError, EngineLoadError, ServerStartError, AcceptanceRunError, CaptureRunError):
        assert issubclass(failure, EngineFailure)
    exit_codes = (ROOT / "docs" / "cli.md").read_text()
    assert "| 6 | a serving engine's process failed" in exit_codes
