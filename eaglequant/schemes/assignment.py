"""Which scheme each linear of a draft is stored in: one scheme for the decoder, and optionally another for ``fc``
or ``lm_head``, the two linears outside the decoder (each its own module in every engine, never fused with another).

``lm_head`` is the largest linear of a draft (on Kimi-K2.5's head, 1,174 M of its 3,178 M parameters) and is read
in full k times per speculative round, so giving it its own scheme moves the bytes a round reads more than any
other choice; the decoder keeps the scheme its engines run fastest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from eaglequant.schemes.model import Scheme, VerifyThresholds

# The linears a scheme of their own may be given: each is its own runtime module in every engine.
OWN_SCHEME_MODULES = ("fc", "lm_head")
# Thresholds that bound from below (the rest bound from above).
_LOWER_BOUNDS = frozenset({"min_sqnr_db", "min_cosine", "min_top1_agreement"})


@dataclass(frozen=True)
class SchemeAssignment:
    """``main``: the decoder's scheme (and fc's and lm_head's unless given their own); ``own``: canonical module
    (``fc``, ``lm_head``) -> its own scheme."""

    main: Scheme
    own: Mapping[str, Scheme] = field(default_factory=dict)

    def of(self, module: str) -> Scheme:
        """The scheme the canonical ``module`` is stored in."""
        return self.own.get(module, self.main)

    @property
    def mixed(self) -> bool:
        """Whether linears are stored in different kinds."""
        return any(scheme.kinds != self.main.kinds for scheme in self.own.values())

    @property
    def schemes(self) -> list[Scheme]:
        """Every scheme used, the main one first, each once."""
        found = [self.main]
        for scheme in self.own.values():
            if all(scheme.kinds != other.kinds for other in found):
                found.append(scheme)
        return found

    def head_thresholds(self) -> VerifyThresholds:
        """What the whole head is held to: per threshold, the loosest of the schemes it mixes (each linear is
        held to its own scheme's)."""
        loosest = {}
        for limit in fields(VerifyThresholds):
            values = [getattr(scheme.verify, limit.name) for scheme in self.schemes]
            loosest[limit.name] = min(values) if limit.name in _LOWER_BOUNDS else max(values)
        return VerifyThresholds(**loosest)

    def describe(self) -> str:
        """``fp8-per-channel`` or ``fp8-per-channel, lm_head nvfp4``."""
        own = [f"{module} {scheme.name}" for module, scheme in sorted(self.own.items())]
        return ", ".join([self.main.name, *own])

    def with_main(self, main: Scheme) -> SchemeAssignment:
        return replace(self, main=main)
