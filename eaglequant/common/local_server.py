"""A server process eaglequant starts itself, on this machine: a free port on 127.0.0.1, its own process group,
a bounded wait for it to answer, and a stop that ends the group whatever happened (an error, Ctrl-C).

Nothing here knows which server it runs; ``measurement/launch.py`` starts vLLM's OpenAI-compatible server with it,
and any other command that needs a served engine can do the same.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from eaglequant.common.engine_failure import EngineFailure, failure_line

HOST = "127.0.0.1"
STOP_GRACE_S = 20.0  # after SIGTERM, before SIGKILL
POLL_S = 1.0


class ServerStartError(EngineFailure):
    """The server exited, or did not answer, before it was ready."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextmanager
def local_server(
    command: Sequence[str],
    ready_url: str,
    log: Path,
    *,
    start_timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    is_ready: Callable[[str], bool] = answers,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (its output to ``log``) in a process group of its own until ``ready_url`` answers, at most
    ``start_timeout_s``; yield the process; on leaving, however it is left, stop the whole group."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(command), stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
    try:
        _wait_ready(process, ready_url, log, start_timeout_s, is_ready)
        yield process
    finally:
        stop_group(process)


def _wait_ready(
    process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float, is_ready: Callable[[str], bool]
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = failure_line(_read(log), "server")
            raise ServerStartError(f"the server exited {process.returncode} before it answered: {said}")
        if is_ready(url):
            return
        time.sleep(POLL_S)
    said = failure_line(_read(log), "server")
    raise ServerStartError(f"the server did not answer {url} in {timeout_s:.0f} s: {said}")


def _read(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""


def stop_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the process's group (``start_new_session``: the group's id is its pid, even after it exited),
    then SIGKILL to what is left of the group after ``grace_s``."""
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    _signal_group(group, signal.SIGKILL)  # the group's other processes (engine workers) too
    process.wait()


def _signal_group(group: int, signal_number: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal_number)
