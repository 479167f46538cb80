"""``fc`` and ``lm_head`` in schemes of their own: what a conversion checks before writing linears of different
kinds into one checkpoint.

Only some formats store per-module kinds (ModelOpt's MIXED_PRECISION) and only some engines read them
(``Engine.mixed_formats``); each engine must load every scheme used in that format, and the format's per-module
entries name the engines' runtime modules exactly, layer index included, so the target's layer count must be known.
The format's and the engines' parts of the plan have decided each of these; this module refuses, in that order.
"""

from __future__ import annotations

from collections.abc import Mapping

from eaglequant.common.errors import InputError, suggested, words
from eaglequant.engines.base import TARGET_LAYERS_HINT
from eaglequant.engines.planning import EnginePlan
from eaglequant.formats import FORMATS, Format
from eaglequant.formats.base import HeadStorage
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import Scheme


class OwnSchemesNeedLayerCount(InputError):
    """Per-module entries cannot be written without the target's layer count (``search`` counts what it skips)."""


def own_rules(head: HeadDescription, own: Mapping[str, Scheme]) -> list[str]:
    """The checkpoint names of the linears given a scheme of their own: they are quantized, as ``--quantize`` asks."""
    present = {linear.module: linear for linear in head.linears}
    for module in own:
        if module not in present:
            raise InputError(
                words(
                    suggested("scheme_for", f"{module}={own[module].name}"), f": this head has no {module} of its own"
                ),
                hint="a draft without it reads the target's, which the engine keeps as the target stores it",
            )
    return [present[module].checkpoint_module for module in own]


def check_own_schemes(fmt: Format, assignment: SchemeAssignment, storage: HeadStorage, decided: EnginePlan) -> None:
    """Refuse what cannot be written or served as asked: a shape the module's own scheme cannot store (``storage``:
    how ``fmt`` stores each linear), a format or engine that does not hold per-module kinds, a scheme an engine does
    not load, an unknown target layer count (``decided``: the engines' part of the plan)."""
    for module, scheme in assignment.own.items():
        problem = storage.problems.get(module)
        if problem is not None:
            raise InputError(words(suggested("scheme_for", f"{module}={scheme.name}"), f": {problem}"))
    if not assignment.mixed:
        return
    if not fmt.stores_mixed:
        able = ", ".join(f.name for f in FORMATS.values() if f.stores_mixed)
        raise InputError(
            f"{fmt.title} cannot store linears of different kinds in one checkpoint ({assignment.describe()})",
            hint=f"formats that can: {able}" if able else "give fc and lm_head the decoder's scheme",
        )
    if decided.mixed_refusals:
        raise InputError(
            f"{decided.mixed_refusals[0]} ({assignment.describe()})",
            hint="target only engines that do (docs/cli.md#per-module-schemes), or one scheme for all",
        )
    if decided.target.count is None:
        raise OwnSchemesNeedLayerCount(
            f"{fmt.title}'s per-module entries name each module as the engine does, after the target's layers, so "
            "writing them needs the target's layer count",
            hint=TARGET_LAYERS_HINT,
        )
