"""A server eaglequant starts itself: ready when it answers, refused when it exits or never answers, and its whole
process group stopped on leaving, an error included (here Python's own http.server, and a child it starts)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from eaglequant.common.local_server import HOST, ServerStartError, answers, free_port, local_server

# http.server in a child of the started process: the group, not only the process, must stop
SERVE_IN_CHILD = (
    "import subprocess, sys; child = subprocess.Popen([sys.executable, '-m', 'http.server', '--bind', '127.0.0.1', "
    "sys.argv[1]]); print(child.pid, flush=True); child.wait()"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_server_answers_inside_and_its_group_is_gone_after(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://{HOST}:{port}/"
    command = [sys.executable, "-c", SERVE_IN_CHILD, str(port)]
    with local_server(command, url, tmp_path / "log", start_timeout_s=60) as process:
        assert answers(url)
        child = int((tmp_path / "log").read_text().split()[0])
        assert _alive(child)
    assert process.poll() is not None
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child) and not answers(url)


def test_an_error_inside_still_stops_the_server(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "http.server", "--bind", HOST, str(port)]
    started: list[object] = []
    with (
        pytest.raises(KeyboardInterrupt),
        local_server(command, f"http://{HOST}:{port}/", tmp_path / "log", start_timeout_s=60) as process,
    ):
        started.append(process)
        raise KeyboardInterrupt
    assert started and process.poll() is not None and not answers(f"http://{HOST}:{port}/")


def test_a_server_that_exits_before_it_answers_is_refused_with_its_error(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "raise ModuleNotFoundError(\"No module named 'uvicorn'\")"]
    with (
        pytest.raises(ServerStartError, match="exited 1 before it answered: ModuleNotFoundError: No module named"),
        local_server(command, f"http://{HOST}:{free_port()}/", tmp_path / "log", start_timeout_s=60),
    ):
        pass


def test_a_server_that_never_answers_is_refused_in_time(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    with (
        pytest.raises(ServerStartError, match="did not answer"),
        local_server(command, f"http://{HOST}:{free_port()}/", tmp_path / "log", start_timeout_s=1.5),
    ):
        pass
    assert time.monotonic() - started < 30
