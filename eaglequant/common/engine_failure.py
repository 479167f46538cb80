"""An engine run that failed, told in the engine's own words: the first error its output names (the root cause; the
lines after it are usually the wrappers that re-raise it, "See stack trace for root cause"), the whole output kept
in a file the user can read after the run's temporary directory is gone, and an exit code of its own."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.errors import EXIT_ENGINE_FAILED, EagleQuantError

# ``ValueError: ...``, ``torch.OutOfMemoryError: ...``, ``(EngineCore pid=9) RuntimeError: ...``
_ERROR_LINE = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(?:[A-Za-z_][\w.]*\.)?\w*(?:Error|Exception)\b:\s*\S")
# Lines that only re-raise an earlier error: never the root cause while an earlier one is there.
_WRAPPERS = ("see stack trace for root cause", "see root cause above", "initialization failed")


class EngineFailure(EagleQuantError):
    """An engine process failed: its root cause and where its whole output is kept (exit code 6)."""

    exit_code = EXIT_ENGINE_FAILED


def wraps_another(line: str) -> bool:
    """Whether an error line only re-raises an earlier one ("... See stack trace for root cause")."""
    return any(wrapper in line.lower() for wrapper in _WRAPPERS)


def first_error(output: str) -> str | None:
    """The engine output's first error line that is not a wrapper of an earlier one (else its first error line,
    else None)."""
    errors = [line.strip() for line in output.splitlines() if _ERROR_LINE.match(line.strip())]
    causes = [line for line in errors if not wraps_another(line)]
    return causes[0] if causes else (errors[0] if errors else None)


def kept_log(output: str, name: str) -> Path:
    """``output`` kept as ``<temp>/eaglequant-engine-logs/NAME-TIME-PID.log`` (it outlives the run's own temporary
    directory; the system's temporary-file cleanup removes it in time)."""
    directory = Path(tempfile.gettempdir()) / "eaglequant-engine-logs"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    write_text_whole(path, output)
    return path


def failure_line(output: str, name: str, reported: str | None = None) -> str:
    """One line for a failed run: its root cause and where its whole output is kept. The cause is the error the run
    ``reported`` itself unless that only wraps an earlier one, else the output's first error line, else its last
    line."""
    cause = reported if reported and not wraps_another(reported) else None
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), None)
    cause = cause or first_error(output) or reported or last or "it printed nothing"
    return f"{cause} (the engine's whole output: {kept_log(output, name)})"
