"""What both probes share: reading a checkpoint's tensors, one line per error, captured warnings, a free port
for the engine's one-process distributed group, a GEMM's error, and the jobs-in, JSON-out loop."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open


class Checkpoint:
    """Tensors of a checkpoint directory: safetensors (single or sharded) or pytorch_model.bin."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._where: dict[str, Path] = {}
        self._bin: dict[str, torch.Tensor] | None = None
        files = sorted(self.directory.glob("*.safetensors"))
        if files:
            for file in files:
                with safe_open(str(file), "pt") as handle:
                    for key in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                        self._where[key] = file
        else:
            bins = sorted(self.directory.glob("*.bin"))
            self._bin = {}
            for file in bins:
                self._bin.update(torch.load(file, map_location="cpu", weights_only=True))

    def names(self) -> list[str]:
        return list(self._bin) if self._bin is not None else list(self._where)

    def get(self, name: str) -> torch.Tensor:
        if self._bin is not None:
            return self._bin[name]
        with safe_open(str(self._where[name]), "pt") as handle:
            return handle.get_tensor(name)

    def all(self) -> dict[str, torch.Tensor]:
        return {name: self.get(name) for name in self.names()}

    def config(self) -> dict[str, Any]:
        return json.loads((self.directory / "config.json").read_text())


def error_line(exc: BaseException) -> str:
    """``Type: message (file:line)`` of where it was raised, on one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}{where}"


class WarningCapture(logging.Handler):
    """Warnings (and worse) logged while one job runs, one line each."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = repr(record.msg)
        self.lines.append(f"{record.levelname} {record.name} [{Path(record.pathname).name}:{record.lineno}] {message}")


def free_port() -> int:
    """A local TCP port for the engine's one-rank gloo group."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gemm_error(output: torch.Tensor, reference: torch.Tensor, note: str) -> dict[str, Any]:
    """The engine kernel's ``output`` against the fp32 source GEMM ``reference``."""
    output = output.float()
    if output.shape != reference.shape:
        return {"max_abs_err": None, "rel_err": None, "note": f"output {list(output.shape)} != {list(reference.shape)}"}
    diff = output - reference
    return {
        "max_abs_err": float(diff.abs().max()),
        "rel_err": float(diff.norm() / reference.norm().clamp_min(1e-30)),
        "note": note,
    }


def new_result(job: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A job's result before it runs: not loaded, nothing found."""
    return {
        "checkpoint": job["checkpoint"],
        "ok": False,
        "error": None,
        **fields,
        "quant_config": None,
        "modules": [],
        "unconsumed": [],
        "warnings": [],
    }


def serve(
    argv: list[str],
    engine: str,
    start: Callable[[], tuple[str, list[str]]],
    run_job: Callable[[dict[str, Any]], dict[str, Any]],
    finish: Callable[[], list[str]] = list,
    platform: Callable[[], dict[str, Any]] = dict,
) -> int:
    """Read the jobs file ``argv[1]``, ``start()`` the engine (its version and patches), run every job, write
    one JSON report to ``argv[2]``. Anything the engine prints goes to stderr; ``finish()`` adds the patches known
    only after the jobs ran."""
    if len(argv) != 3:
        print(f"usage: python -m probes.{engine}_probe JOBS.json OUT.json", file=sys.stderr)
        return 2
    jobs = json.loads(Path(argv[1]).read_text(encoding="utf-8"))["jobs"]
    log = logging.getLogger(f"{engine}_probe")
    with contextlib.redirect_stdout(sys.stderr):
        started = time.perf_counter()
        version, patches = start()
        log.warning("%s %s imported in %.1f s", engine, version, time.perf_counter() - started)
        results = []
        for job in jobs:
            tic = time.perf_counter()
            results.append(run_job(job))
            log.warning("job %s: %.2f s ok=%s", job["checkpoint"], time.perf_counter() - tic, results[-1]["ok"])
        patches = finish() + patches
        measured = platform()
    report = {"engine": engine, "version": version, "patches": patches, "platform": measured, "results": results}
    Path(argv[2]).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


def run_job_file(argv: list[str], run: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """``python -m <probes>.<module> JOB.json OUT.json``: ``run`` the job, write its result, or its error on one
    line (``{"error": ...}``) for the caller to report."""
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    try:
        result = run(job)
    except Exception as exc:
        result = {"error": error_line(exc)}
    Path(argv[2]).write_text(json.dumps(result), encoding="utf-8")
    return 0
