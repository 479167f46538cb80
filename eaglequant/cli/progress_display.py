"""How a run's phases show on stderr: a live bar on a terminal, one timestamped line per phase elsewhere.

The bar of a phase with measurable work counts bytes read plus written (so it moves while a quantized weight
is read, not only when its output lands), its rate is a moving average over the last seconds, and its tensor
counter advances once per finished tensor, so it never passes its total.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.markup import escape
from rich.progress import BarColumn, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from eaglequant.cli.output import MODE, err, progress_enabled
from eaglequant.common.progress import NoProgress, NoSteps, Progress
from eaglequant.common.sizes import decimal_bytes

RATE_WINDOW_S = 3.0  # the rate shown is over this many recent seconds, not since the start


class _WorkColumn(ProgressColumn):
    """``1.20 GB/2.60 GB`` of bytes read and written, and the current rate; nothing for a phase without a total."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        speed = f"  {decimal_bytes(task.speed)}/s" if task.speed else ""
        return Text(f"{decimal_bytes(task.completed)}/{decimal_bytes(task.total)}{speed}")


class PhaseDisplay:
    """Implements :class:`eaglequant.common.progress.Progress` for the terminal (``bars``) and for logs (``log``)."""

    def __init__(self, *, bars: bool, log: bool) -> None:
        self._log = log
        self._bars: RichProgress | None = None
        if bars:
            self._bars = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                _WorkColumn(),
                TextColumn("{task.fields[tensors]}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[label]}", style="dim"),
                console=err.console,
                transient=True,
                speed_estimate_period=RATE_WINDOW_S,
            )
        self._name: str | None = None
        self._task_id: TaskID | None = None
        self._started = 0.0
        self._work = self._work_total = 0
        self._tensors = 0
        self._tensors_total: int | None = None

    def phase(self, name: str, *, work: int | None = None, tensors: int | None = None) -> None:
        self._end_phase()
        self._name, self._started = name, time.perf_counter()
        self._work, self._work_total = 0, work or 0
        self._tensors, self._tensors_total = 0, tensors
        if self._bars is not None:
            if self._task_id is None:
                self._bars.start()
            else:
                self._bars.remove_task(self._task_id)
            self._task_id = self._bars.add_task(name, total=work, tensors=self._counter(), label="")
            self._bars.refresh()  # every phase shows, however short

    def advance(self, work: int, finished: str | None = None) -> None:
        self._work += work
        if finished is not None and (self._tensors_total is None or self._tensors < self._tensors_total):
            self._tensors += 1
        if self._bars is not None and self._task_id is not None:
            self._bars.update(self._task_id, advance=work, tensors=self._counter())
            if finished:
                self._bars.update(self._task_id, label=finished)
                self._bars.refresh()

    def stop(self) -> None:
        self._end_phase()
        if self._bars is not None and self._task_id is not None:
            self._bars.stop()
            self._task_id = None

    def discard(self) -> None:
        """Stop without logging the phase that an error cut short (the error line says what happened)."""
        self._name = None
        self.stop()

    def _counter(self) -> str:
        return "" if self._tensors_total is None else f"{self._tensors}/{self._tensors_total} tensors"

    def _end_phase(self) -> None:
        if self._name is None:
            return
        seconds = time.perf_counter() - self._started
        if self._log:
            parts = [f"{time.strftime('%H:%M:%S')} {self._name}: {seconds:.2f} s"]
            if self._tensors_total is not None:
                parts.append(self._counter())
            if self._work_total:
                rate = decimal_bytes(self._work / max(seconds, 1e-9))
                parts.append(f"{decimal_bytes(self._work)} read and written ({rate}/s)")
            err.print(f"[dim]{escape(', '.join(parts))}[/]", markup=True, soft_wrap=True)
        self._name = None


def progress_display() -> Progress:
    """Bars on a terminal, log lines elsewhere (and both with --verbose); nothing with --quiet."""
    if MODE.quiet:
        return NoProgress()
    bars = progress_enabled()
    return PhaseDisplay(bars=bars, log=not bars or MODE.verbose)


@contextmanager
def shown(display: Progress) -> Iterator[Progress]:
    """Stop ``display`` when the block ends; a phase an error ends is not logged as if it had completed."""
    try:
        yield display
    except BaseException:
        if isinstance(display, PhaseDisplay):
            display.discard()
        raise
    display.stop()


@contextmanager
def phase(name: str) -> Iterator[Progress]:
    """A phase the command itself runs (``verify``'s checks): shown while it lasts."""
    with shown(progress_display()) as display:
        display.phase(name)
        yield display


def eta_text(seconds: float) -> str:
    """``1m20s``, ``2h05m``, ``45s``."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class StepDisplay:
    """Implements :class:`eaglequant.common.progress.Steps`: a live bar on a terminal, else one line a step
    (``prompt 3/22 (the source draft) … ETA 1m20s``), the ETA from the steps done so far."""

    def __init__(self, *, bars: bool) -> None:
        self._started = time.perf_counter()
        self._bars: RichProgress | None = None
        self._task_id: TaskID | None = None
        if bars:
            self._bars = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}", style="dim"),
                console=err.console,
                transient=True,
            )

    def step(self, text: str, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self._started
        eta = f"ETA {eta_text(elapsed / done * (total - done))}" if done else ""
        if self._bars is None:
            err.print(f"[dim]{escape(f'{text} … {eta}')}[/]", markup=True, soft_wrap=True)
            return
        if self._task_id is None:
            self._bars.start()
            self._task_id = self._bars.add_task(text, total=total, eta=eta)
        self._bars.update(self._task_id, description=text, completed=done, total=total, eta=eta)

    def stop(self) -> None:
        if self._bars is not None and self._task_id is not None:
            self._bars.stop()
            self._task_id = None


def steps_display() -> StepDisplay | NoSteps:
    """Per-step progress with an ETA on stderr: a bar on a terminal, lines elsewhere; nothing with --quiet."""
    if MODE.quiet:
        return NoSteps()
    return StepDisplay(bars=progress_enabled())
