"""Typed errors and the exit codes they map to.

Every error a user can act on is an :class:`EagleQuantError`: its message is one line that says what
went wrong, where (file, tensor), and what to do. The CLI prints that line and exits with ``exit_code``;
a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FAILED = 3  # a check on a written checkpoint failed (explain found a mismatch, a parity threshold)
EXIT_JOBS_FAILED = 4  # batch: at least one job failed (the others ran; see the summary)
EXIT_NOT_VERIFIED = 5  # verify: the checks that ran hold, but parity and fidelity did not run (no source)
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM


class EagleQuantError(Exception):
    """Base class: an error with a one-line, actionable message."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message}; {self.hint}"
        return " ".join(text.split())


class InputError(EagleQuantError):
    """The user's input (checkpoint, config, options) is unusable. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class CheckpointError(InputError):
    """A checkpoint file is malformed, truncated or inconsistent."""


class LayoutError(InputError):
    """The tensors do not form an EAGLE-3 head we recognise, or contradict config.json."""


class SchemeError(InputError):
    """A scheme file is invalid, or a scheme/format/engine combination is not loadable."""


class OutputError(InputError):
    """The destination cannot be written as asked (exists, inside SRC, not writable)."""


class ExclusionProofError(EagleQuantError):
    """The exclusions written into config.json would not be applied by an engine as intended."""

    exit_code = EXIT_INTERNAL
