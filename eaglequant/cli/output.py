"""Rendering for the CLI: messages and progress on stderr, results (``--json``) on stdout."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
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


class BarProgress:
    """Two bars: bytes written (with rate) and tensors done (with rate)."""

    def __init__(self) -> None:
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[label]}", style="dim"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        )
        self._bytes: TaskID | None = None
        self._tensors: TaskID | None = None
        self._done = 0

    def start(self, total_bytes: int, total_tensors: int) -> None:
        self._bar.start()
        self._bytes = self._bar.add_task("writing", total=total_bytes, label="")
        self._tensors = self._bar.add_task("tensors", total=total_tensors, label="", visible=False)
        self._total_tensors = total_tensors

    def advance(self, nbytes: int, label: str) -> None:
        assert self._bytes is not None and self._tensors is not None
        self._done += 1
        self._bar.update(self._bytes, advance=nbytes, label=f"{self._done}/{self._total_tensors} tensors {label}")
        self._bar.update(self._tensors, advance=1)

    def stop(self) -> None:
        self._bar.stop()
