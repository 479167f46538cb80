"""The plan's refusal of what a targeted engine release cannot load, as one typed exception: every engine refusal the
plan raises is an :class:`EngineRefusal` carrying what was refused (:class:`Refused`), the release and why, so a
caller that builds plans (``search``, over its candidates) catches the plan's refusal instead of predicting it.

What is refused is never decided here: each refusal is read from the engine's one decision, :meth:`Engine.decide`
(:mod:`eaglequant.engines.support` asks it, in the order the plan refuses)."""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.errors import InputError, Words
from eaglequant.common.text_enum import TextEnum
from eaglequant.engines.base import Engine


class Refused(TextEnum):
    """What a release refuses, in the order the plan asks (the first refusal found is the one raised)."""

    HEAD = "head"  # it cannot build the draft at all, whatever the scheme
    SCHEME = "scheme"  # it does not load the main scheme's kinds from the format
    MODULE_KINDS = "module-kinds"  # it does not read a linear's own scheme from the format (per-module kinds)
    MODULE = "module"  # it runs a module the conversion asks to quantize (fc, lm_head) unquantized
    KEPT = "kept"  # it cannot load unquantized a module the checkpoint keeps so (the format cannot store it, a rule)


REFUSAL_ORDER = tuple(Refused)


@dataclass(frozen=True)
class Refusal:
    engine: Engine
    refused: Refused
    why: str  # the engine's decision's words
    module: str | None = None  # MODULE: the module it runs unquantized; KEPT: the linears kept

    @property
    def rank(self) -> int:
        return REFUSAL_ORDER.index(self.refused)


def first_refusal(refusals: list[Refusal | None]) -> Refusal | None:
    """The refusal the plan raises among each targeted engine's first: the earliest in :data:`REFUSAL_ORDER`, then
    the first engine's."""
    found = [refusal for refusal in refusals if refusal is not None]
    return min(found, key=lambda refusal: refusal.rank) if found else None


class EngineRefusal(InputError):
    """The plan refuses what a targeted engine release cannot load (``refusal``: which release, what, why), in one
    line naming what works."""

    def __init__(self, refusal: Refusal, message: str | Words, *, hint: str | Words | None = None) -> None:
        super().__init__(message, hint=hint)
        self.refusal = refusal
