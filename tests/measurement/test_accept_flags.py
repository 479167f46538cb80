"""``accept``'s options that do not fit the way it runs: each refused in one plain line, before anything runs or is
written (``--window`` offline, ``--reference-server`` beside one ``--server``, ``--window 0``), and a server that is
not vLLM's named as such, without its web page in the line."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from eaglequant.measurement.record import ACCEPT_NAME
from tests.conftest import run_cli
from tests.measurement.test_accept_server import StandIn

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
PAGE = "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1></body></html>\n"


def last_line(done: Any) -> str:
    assert done.exit_code == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("error") == 1, done.stderr
    return str(done.stderr.strip().splitlines()[-1])


def test_window_offline_is_refused_and_the_record_is_left_alone(tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "config.json").write_text("{}")
    (dst / ACCEPT_NAME).write_text('{"kept": true}\n')
    done = run_cli("accept", dst, "--target", PAIR / "target", "--window", "5")
    line = last_line(done)
    assert "--window reads one running server's live traffic" in line, line
    assert (dst / ACCEPT_NAME).read_text() == '{"kept": true}\n'


def test_a_reference_server_beside_one_server_is_refused(serve: Callable[[StandIn], str]) -> None:
    url, reference = serve(StandIn()), serve(StandIn(draft=False))
    line = last_line(run_cli("accept", "--server", url, "--reference-server", reference, "--max-prompts", "2"))
    assert "--reference-server is for comparing DSTs" in line, line


@pytest.mark.parametrize("value", ["0", "-1"])
def test_window_at_or_below_zero_is_refused_as_the_help_says(serve: Callable[[StandIn], str], value: str) -> None:
    done = run_cli("accept", "--server", serve(StandIn()), "--window", value)
    assert done.exit_code == 2 and "greater than or equal to 0.001" in done.stderr, done.stderr  # as the help
    shown = run_cli("accept", "--help").stdout
    assert "[0.001<=x<=604800.0]" in shown and "[0<=x<=604800" not in shown, shown


@pytest.fixture
def web_page() -> Iterator[str]:
    """A web server that is not vLLM: every path answers 404 with an HTML page."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            data = PAGE.encode()
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_that_is_not_vllm_is_one_plain_line(web_page: str) -> None:
    line = last_line(run_cli("accept", "--server", web_page, "--max-prompts", "2"))
    assert f"{web_page}/v1/models" in line and "404" in line and "not a vLLM server?" in line, line
    assert "<" not in line and "Not Found</" not in line, line
