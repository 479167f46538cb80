"""Each linear's kinds in a checkpoint whose config gives modules kinds of their own (ModelOpt's MIXED_PRECISION).

Such a config names each quantized module by vLLM's runtime name (``model.layers.61.mlp.gate_up_proj``, vLLM being the
engine that reads per-module kinds, so the name it looks each module up by), for the target layer count it was
written for. vLLM's runtime modules for this head map those names back to the canonical linears they compute (a fused
module's members share its kinds), at the layer count under which the most listed names are vLLM's.
"""

from __future__ import annotations

import re

from eaglequant.engines import ENGINES
from eaglequant.formats import WrittenConfig
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import builtin_scheme_for

RUNTIME_NAMES_OF = "vllm"  # the engine whose runtime names a per-module config lists
_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def linear_kinds(written: WrittenConfig, head: HeadDescription) -> dict[str, KindPair]:
    """Canonical linear -> the kinds a per-module config stores it in, for each linear it lists (empty for a config
    with one kinds for every quantized linear)."""
    if not written.module_kinds:
        return {}
    engine = ENGINES[RUNTIME_NAMES_OF]
    best: dict[str, KindPair] = {}
    for count in _layer_counts(written, head):
        found: dict[str, KindPair] = {}
        for module in engine.runtime_modules(head, count):
            kinds = next((written.module_kinds[n] for n in module.names if n in written.module_kinds), None)
            if kinds is not None:
                found.update(dict.fromkeys(module.members, kinds))
        if len(found) > len(best):
            best = found
    return best


def written_schemes(written: WrittenConfig, head: HeadDescription) -> SchemeAssignment:
    """The built-in schemes of the kinds a config declares: its main kinds', and each linear's own where it differs."""
    main = builtin_scheme_for(written.kinds)
    own = {module: kinds for module, kinds in linear_kinds(written, head).items() if kinds != main.kinds}
    return SchemeAssignment.per_module(main, {module: builtin_scheme_for(kinds) for module, kinds in own.items()})


def _layer_counts(written: WrittenConfig, head: HeadDescription) -> list[int]:
    """The target layer counts the listed names may have been written for: a listed layer index less the index of
    one of the head's layers (0 when no listed name has a layer index)."""
    layers = {linear.layer for linear in head.decoder_linears if linear.layer is not None}
    indices = {int(found) for name in written.module_kinds for found in _LAYER_INDEX.findall(name)}
    return sorted({index - layer for index in indices for layer in layers if index >= layer}) or [0]
