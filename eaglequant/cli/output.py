"""Rendering for the CLI: messages and progress on stderr, results (``--json``) on stdout."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress

err = Console(stderr=True, highlight=False)
if not err.is_terminal and "COLUMNS" not in os.environ:
    err = Console(stderr=True, highlight=False, width=120)  # logs and CI: tables need room for tensor names


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def progress_enabled() -> bool:
    if os.environ.get("EAGLEQUANT_DISABLE_PROGRESS_BARS") or os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"):
        return False
    return err.is_terminal


def quiet_hub_progress() -> None:
    """huggingface_hub draws its own bars on stderr: keep them for a terminal, as ours."""
    if not progress_enabled():
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


class BarProgress:
    """One bar: bytes written with their rate, and tensors done with theirs."""

    def __init__(self) -> None:
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TextColumn("{task.fields[tensors]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[label]}", style="dim"),
            console=err,
            transient=True,
        )
        self._task: TaskID | None = None
        self._done = 0
        self._total = 0
        self._started = 0.0

    def start(self, total_bytes: int, total_tensors: int) -> None:
        self._total, self._started = total_tensors, time.perf_counter()
        self._bar.start()
        self._task = self._bar.add_task("writing", total=total_bytes, tensors=f"0/{total_tensors} tensors", label="")

    def advance(self, nbytes: int, label: str) -> None:
        assert self._task is not None
        self._done += 1
        rate = self._done / max(time.perf_counter() - self._started, 1e-9)
        tensors = f"{self._done}/{self._total} tensors {rate:.1f}/s"
        self._bar.update(self._task, advance=nbytes, tensors=tensors, label=label)

    def stop(self) -> None:
        self._bar.stop()
