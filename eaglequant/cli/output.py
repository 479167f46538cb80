"""The CLI's one output layer: results on stdout, everything else on stderr.

Every command hands its result to :func:`result` (a JSON document under ``--json``, its human rendering
otherwise) and says anything else through :func:`note`, :func:`info` and :func:`detail`, which respect
``--quiet`` and ``--verbose``. Errors go through :func:`error`: one line on stderr, and under ``--json`` also
one JSON object on stdout, so a pipe into ``jq`` never meets an empty stream.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from eaglequant.common.environment import env_true
from eaglequant.common.findings import Finding

PROGRESS_SWITCHES = ("EAGLEQUANT_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")


@dataclass
class Mode:
    """What the command line asked for; reset before every command (see ``eaglequant.cli``)."""

    json: bool = False
    quiet: bool = False  # errors only on stderr
    verbose: bool = False  # also the details, and phase timings on a terminal
    debug: bool = False  # tracebacks


MODE = Mode()


def _console(*, stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ  # logs and CI: tables need room for names
    return Console(stderr=stderr, highlight=False, width=120 if wide else None)


class _Stream:
    """A console bound to the stream as it is when used (tests swap sys.stdout and sys.stderr)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None
        self._stream: Any = None

    @property
    def console(self) -> Console:
        stream = sys.stderr if self._stderr else sys.stdout
        if self._console is None or stream is not self._stream:
            self._console, self._stream = _console(stderr=self._stderr), stream
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal

    @property
    def width(self) -> int:
        return self.console.width


out = _Stream(stderr=False)  # results
err = _Stream(stderr=True)  # progress, notes, warnings, errors


def progress_enabled() -> bool:
    """Bars only on a terminal, unless --quiet or a switch turns them off."""
    return err.is_terminal and not MODE.quiet and not any(env_true(name) for name in PROGRESS_SWITCHES)


def quiet_hub_progress() -> None:
    """huggingface_hub draws its own bars on stderr: keep them where ours are shown."""
    if not progress_enabled():
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


# What --quiet sets while a command runs, for libraries imported during it: transformers' and huggingface_hub's
# progress bars (read when they are imported) and transformers' log level.
_QUIET_ENVIRONMENT = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Under --quiet, the libraries a command runs (transformers, huggingface_hub) print no progress bars, logs or
    warnings: through their environment switches for those imported during the command, their logging API for
    those already imported; all restored afterwards (tests run many commands in one process)."""
    if not MODE.quiet:
        yield
        return
    saved = {name: os.environ.get(name) for name in _QUIET_ENVIRONMENT}
    before = _transformers_state()
    os.environ.update(_QUIET_ENVIRONMENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _set_transformers_state((False, 40))  # logging.ERROR
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            bars = not any(env_true(name) for name in PROGRESS_SWITCHES)
            _set_transformers_state(before or (bars, 30))  # imported during the command: its defaults (WARNING)


def _transformers_state() -> tuple[bool, int] | None:
    """transformers' progress bars on, and its log level; None when it is not imported (nothing to set)."""
    if "transformers" not in sys.modules:
        return None
    from transformers.utils import logging as transformers_logging

    return transformers_logging.is_progress_bar_enabled(), transformers_logging.get_verbosity()


def _set_transformers_state(state: tuple[bool, int]) -> None:
    if "transformers" not in sys.modules:
        return
    from transformers.utils import logging as transformers_logging

    bars, level = state
    if bars != transformers_logging.is_progress_bar_enabled():
        (transformers_logging.enable_progress_bar if bars else transformers_logging.disable_progress_bar)()
    transformers_logging.set_verbosity(level)


def result(data: Any, render: Callable[[], None], *, one_line: bool = False) -> None:
    """The command's result on stdout: ``data``, the typed result's JSON, as one document under --json (on one line
    with ``one_line``, for a CI system's output variables), else ``render()``, which reads the typed result itself."""
    if MODE.json:
        print_json(data, one_line=one_line)
    else:
        render()


def print_json(data: Any, *, one_line: bool = False) -> None:
    sys.stdout.write(json.dumps(data, indent=None if one_line else 2, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value.absolute())
    return str(value)


def absolute(path: str | Path | None) -> str | None:
    """A path as JSON and messages give it: absolute, not resolved through links."""
    return None if path is None else str(Path(path).absolute())


def note(text: str | Finding) -> None:
    """Something the user should know (a warning); not shown with --quiet."""
    if not MODE.quiet:
        err.print(f"[yellow]note[/]: {escape(str(text))}", markup=True, soft_wrap=True)


def info(text: str, *, markup: bool = False) -> None:
    """A message about the run (what happens, where things went); not shown with --quiet."""
    if not MODE.quiet:
        err.print(text if markup else escape(text), markup=True, soft_wrap=True)


def detail(text: str) -> None:
    """Shown with --verbose only."""
    if MODE.verbose and not MODE.quiet:
        err.print(f"[dim]{escape(text)}[/]", markup=True, soft_wrap=True)


def error(message: str, exit_code: int, error_type: str, *, internal: bool = False) -> None:
    """One line on stderr; under --json also ``{"ok": false, "error": {...}, "exit_code": N}`` on stdout."""
    label = "internal error" if internal else "error"
    err.print(f"[bold red]{label}:[/] {escape(message)}", markup=True, soft_wrap=True)
    if MODE.json:
        print_json({"ok": False, "error": {"type": error_type, "message": message}, "exit_code": exit_code})


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 flip``, ``2 flips``, ``0 flips``; ``many``: the plural when it is not ``noun`` + s."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
