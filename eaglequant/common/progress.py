"""Progress reporting, kept behind a tiny protocol so the library has no UI dependency.

A run is a sequence of phases (``reading``, ``writing``, ``hashing``, ``checking``, ``verifying``...). A phase
with measurable work gives its total in bytes (read plus written) and the number of tensors it finishes;
``advance`` reports bytes done and, when a tensor is complete, its name, so a display counts tensors, never
pieces of them.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def phase(self, name: str, *, work: int | None = None, tensors: int | None = None) -> None:
        """A phase begins (ending the one before); ``work``, ``tensors``: its totals, None when unknown."""

    def advance(self, work: int, finished: str | None = None) -> None:
        """``work`` more bytes read or written; ``finished``: the tensor this completed, if any."""

    def stop(self) -> None:
        """The last phase ended."""


class NoProgress:
    def phase(self, name: str, *, work: int | None = None, tensors: int | None = None) -> None:
        pass

    def advance(self, work: int, finished: str | None = None) -> None:
        pass

    def stop(self) -> None:
        pass


class Steps(Protocol):
    """Countable steps of a long run (a prompt, or a run of the engine): ``text`` says which one just finished
    (``prompt 3/22 (the source draft)``); ``done`` of ``total`` over the whole command give the ETA."""

    def step(self, text: str, done: int, total: int) -> None: ...

    def stop(self) -> None: ...


class NoSteps:
    def step(self, text: str, done: int, total: int) -> None:
        pass

    def stop(self) -> None:
        pass


class Tally:
    """Steps counted over a whole command of ``total`` steps, each reported to ``steps`` as it finishes."""

    def __init__(self, steps: Steps, total: int) -> None:
        self.steps, self.total, self.done = steps, total, 0

    def skipped(self, steps: int) -> None:
        """``steps`` foreseen will not run (a draft serving bytes already measured)."""
        self.total = max(self.total - steps, self.done)

    def finished(self, text: str) -> None:
        self.done += 1
        self.total = max(self.total, self.done)
        self.steps.step(text, self.done, self.total)
