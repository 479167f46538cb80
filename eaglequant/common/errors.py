"""Typed errors and the exit codes they map to.

Every error a user can act on is an :class:`EagleQuantError`: its message is one line that says what
went wrong, where (file, tensor), and what to do. The CLI prints that line and exits with ``exit_code``;
a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FAILED = 3  # a check on a written checkpoint failed (explain found a mismatch, a parity threshold)
EXIT_JOBS_FAILED = 4  # batch: at least one job failed (the others ran; see the summary)
EXIT_NOT_VERIFIED = 5  # verify: the checks that ran hold, but parity and fidelity did not run (no source)
EXIT_ENGINE_FAILED = 6  # a serving engine's process failed (its root cause and whole output are named)
EXIT_INCONCLUSIVE = 7  # a change in acceptance straddles its budget: too few prompts to tell (no check failed)
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM


class Style(Enum):
    """How a message shows a parameter's value."""

    GIVEN = "given"  # a value the user gave, echoed: max_shard_size='lots' / --max-shard-size 'lots'
    SUGGESTED = "suggested"  # a value to give: format='modelopt' / --format modelopt / format = "modelopt"
    PLACEHOLDER = "placeholder"  # a word standing for a value: source=SRC / --source SRC
    SWITCH = "switch"  # a flag turned on: overwrite=True / --overwrite / overwrite = true


@dataclass(frozen=True)
class Param:
    """A parameter a message names. Each front end words it (:data:`Wording`): the library by its keyword
    (``overwrite=True``), the CLI by its flag (``--overwrite``), a batch job file by its key."""

    name: str
    value: Any = None
    style: Style | None = None  # None: the parameter alone, without a value

    def python(self) -> str:
        if self.style is None:
            return self.name
        if self.style is Style.SWITCH:
            return f"{self.name}=True"
        return f"{self.name}={self.value if self.style is Style.PLACEHOLDER else repr(self.value)}"


def given(name: str, value: Any) -> Param:
    return Param(name, value, Style.GIVEN)


def suggested(name: str, value: Any) -> Param:
    return Param(name, value, Style.SUGGESTED)


def placeholder(name: str, word: str) -> Param:
    return Param(name, word, Style.PLACEHOLDER)


def switch(name: str) -> Param:
    return Param(name, True, Style.SWITCH)


Words = tuple["str | Param", ...]
Wording = Callable[[Param], str]  # how a front end says a parameter


def words(*pieces: str | Param) -> Words:
    """A message naming parameters: text and :class:`Param` pieces, worded when it is shown."""
    return pieces


def worded(text: str | Words | None, wording: Wording = Param.python) -> str | None:
    if text is None or isinstance(text, str):
        return text
    return "".join(piece if isinstance(piece, str) else wording(piece) for piece in text)


class EagleQuantError(Exception):
    """Base class: an error with a one-line, actionable message. The message and hint may name parameters
    (:func:`words`); :meth:`one_line` says them as a front end does (the library's keywords by default)."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str | Words, *, hint: str | Words | None = None) -> None:
        self.words: Words = (message,) if isinstance(message, str) else message
        self.hint_words: Words | None = (hint,) if isinstance(hint, str) else hint
        super().__init__(self.one_line())

    @property
    def message(self) -> str:
        return worded(self.words) or ""

    @property
    def hint(self) -> str | None:
        return worded(self.hint_words)

    def one_line(self, wording: Wording = Param.python) -> str:
        message, hint = worded(self.words, wording), worded(self.hint_words, wording)
        text = message if not hint else f"{message}; {hint}"
        return " ".join((text or "").split())


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
