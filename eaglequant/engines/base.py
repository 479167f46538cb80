"""How a serving engine names a draft head's modules at run time and matches exclusion rules."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from eaglequant.layouts.head import HeadDescription


@dataclass(frozen=True)
class RuntimeModule:
    """One module the engine builds for the draft.

    ``names``: the runtime prefix the engine matches rules against; further entries are spellings
    other engine versions use, and written rules must treat all of them alike.
    ``members``: the canonical head linears it computes (several when the engine fuses them).
    ``quantizable``: whether the engine applies the format's scheme to this module at all.
    """

    names: tuple[str, ...]
    members: tuple[str, ...]
    quantizable: bool = True


class Engine(ABC):
    name: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def runtime_modules(self, head: HeadDescription, target_layers: int) -> list[RuntimeModule]: ...

    @abstractmethod
    def matching_rule(self, format_name: str, runtime_name: str, patterns: list[str]) -> str | None:
        """The first pattern that makes the engine exclude ``runtime_name``, or None."""
