"""Progress reporting, kept behind a tiny protocol so the library has no UI dependency."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, total_bytes: int, total_tensors: int) -> None: ...

    def advance(self, nbytes: int, label: str) -> None: ...

    def stop(self) -> None: ...


class NoProgress:
    def start(self, total_bytes: int, total_tensors: int) -> None:
        pass

    def advance(self, nbytes: int, label: str) -> None:
        pass

    def stop(self) -> None:
        pass
