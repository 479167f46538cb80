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
    ``quantizable``: whether the engine applies a format's scheme to this module at all; ``None``
    defers to :meth:`Engine.applies_scheme`, which knows per-format exceptions.
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

    @abstractmethod
    def write_pattern(self, format_name: str, runtime_name: str, any_layer: bool) -> str:
        """A pattern this engine, reading ``format_name``'s config, matches against ``runtime_name``.

        ``any_layer``: the layer index in ``model.layers.{i}.`` must be matched whatever it is.
        """

    def applies_scheme(self, module: RuntimeModule, format_name: str) -> bool:
        """Whether the engine quantizes ``module`` when no exclusion rule matches it."""
        return module.quantizable
