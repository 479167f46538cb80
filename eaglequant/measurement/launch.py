"""``accept --launch``: vLLM's OpenAI-compatible server started by eaglequant, once per draft, and measured as a
running one is (``server.py``).

Each run is ``<engine python> -m vllm.entrypoints.openai.api_server --model TARGET [--speculative-config ...]``
with the user's engine arguments, on 127.0.0.1 at a free port (or the one ``--port`` gives, checked free first), in
a process group of its own; eaglequant waits for ``/health`` (bounded), measures, and stops the group whatever
happened. ``-m`` rather than the ``vllm`` console script, whose version lookup fails in vLLM's CPU build.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from eaglequant.common.local_server import HOST, ServerStartError, free_port, local_server
from eaglequant.measurement.engine_args import server_flags
from eaglequant.measurement.measure import AcceptanceRunError, EngineRun, Runner, Settings
from eaglequant.measurement.server import Server, measure_on_server

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
START_TIMEOUT_S = 1800.0  # loading the target (a 1T-parameter MoE reads its weights for minutes)


def server_command(interpreter: Path, settings: Settings, draft: Path | None, port: int) -> list[str]:
    """The command that serves ``settings.target`` with ``draft`` (None: alone) at 127.0.0.1:``port``."""
    command = [str(interpreter), "-m", SERVER_MODULE, "--model", str(settings.target.resolve())]
    command += ["--host", HOST, "--port", str(port), *server_flags(settings.served_arguments())]
    if draft is not None:
        speculative = {
            "method": "eagle3",
            "model": str(draft.resolve()),
            "num_speculative_tokens": settings.draft_tokens,
        }
        command += ["--speculative-config", json.dumps(speculative)]
    return command


def launch_runner(
    interpreter: Path,
    settings: Settings,
    start_timeout_s: float = START_TIMEOUT_S,
    log: Callable[[str], None] = lambda _: None,
    port: int | None = None,
    prompt_done: Callable[[str, str], None] = lambda _what, _label: None,
) -> Runner:
    """A runner that starts a server per run (at ``port``, else a free one), measures it through ``/metrics``, and
    stops it; ``prompt_done`` is told of each prompt answered and the run's label."""

    from eaglequant.engine_load.environment import engine_environment

    ranks = int(settings.served_arguments().get("tensor_parallel_size", 1))

    def run(_place: int, draft: Path | None, label: str) -> EngineRun:
        listens = free_port() if port is None else port
        url = f"http://{HOST}:{listens}"
        with tempfile.TemporaryDirectory(prefix="eaglequant-server-") as tmp:
            server_log = Path(tmp) / "server.log"
            command = server_command(interpreter, settings, draft, listens)
            log(f"{label} on vLLM's server at {url}")
            try:
                with local_server(
                    command, f"{url}/health", server_log, start_timeout_s=start_timeout_s, env=engine_environment(ranks)
                ):
                    return measure_on_server(
                        Server(url, f"the server with {label}"),
                        settings,
                        draft is not None,
                        lambda what: prompt_done(what, label),
                    )
            except ServerStartError as error:
                raise AcceptanceRunError(f"vLLM server with {label} ({interpreter}): {error.message}") from None

    return run
