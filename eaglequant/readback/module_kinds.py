"""Each linear's kinds in a checkpoint whose config gives modules kinds of their own (Quark's layer_quant_config,
compressed-tensors' further config_groups, ModelOpt's MIXED_PRECISION).

Such a config names each module by the runtime name of an engine that reads it (``model.layers.61.mlp.gate_up_proj``
in vLLM, ``model.gate_up_proj`` in SGLang), for the target layer count it was written for. The runtime modules of the
engine whose names the config lists most, at the layer count under which it lists the most, map those names back to
the canonical linears they compute (a fused module's members share its kinds), matched as the format's readers match.
"""

from __future__ import annotations

import re

from eaglequant.engines import ENGINES
from eaglequant.formats import FORMATS, Format, WrittenConfig
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import builtin_scheme_for

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def linear_kinds(written: WrittenConfig, head: HeadDescription) -> dict[str, KindPair]:
    """Canonical linear -> the kinds a per-module config stores it in, for each linear it names (empty for a config
    with one kinds for every quantized linear)."""
    if not written.module_kinds:
        return {}
    fmt = FORMATS[written.format_name]
    readers = [engine for engine in ENGINES.values() if fmt.name in engine.per_module_configs]
    best: dict[str, KindPair] = {}
    for engine in readers:
        for count in _layer_counts(written, head):
            found: dict[str, KindPair] = {}
            for module in engine.runtime_modules(head, count):
                kinds = next((k for t, k in written.module_kinds.items() if _named(fmt, t, module.names)), None)
                if kinds is not None:
                    found.update(dict.fromkeys(module.members, kinds))
            if len(found) > len(best):
                best = found
    return best


def _named(fmt: Format, target: str, names: tuple[str, ...]) -> bool:
    return any(fmt.matches_target(target, name) for name in names)


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
