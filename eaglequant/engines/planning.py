"""The engines' part of a plan, decided in one call: the engine releases targeted, the target's layer count, one
view of each engine, which linears stay in the source dtype and why, and the exclusion rules written in each
engine's dialect and proven against each engine's matching."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eaglequant.common.errors import InputError
from eaglequant.engines import Engine, get_engine
from eaglequant.engines.exclusions import KeepRequest, ModuleVerdict, plan_exclusions
from eaglequant.engines.support import check_engines
from eaglequant.engines.target import TargetLayers, resolve_target_layers
from eaglequant.engines.view import EngineView
from eaglequant.formats.base import Format
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.model import Scheme, builtin_names_by_kinds


@dataclass(frozen=True)
class EnginePlan:
    engines: list[Engine]
    target: TargetLayers
    excluded: dict[str, str]  # canonical linear -> why it keeps its source dtype
    patterns: list[str]  # the exclusion rules written into config.json
    verdicts: list[ModuleVerdict]
    notes: list[str]  # the conditions under which the engines load it, the linears the format cannot store


def plan_engines(
    head: HeadDescription,
    fmt: Format,
    scheme: Scheme,
    engine_names: Sequence[str],
    request: KeepRequest,
    *,
    target_layers: int | None = None,
    target_config: str | Path | None = None,
) -> EnginePlan:
    """Refuse what a targeted engine cannot load (the head, or the scheme in ``fmt``), then decide and prove the
    exclusions for every engine. ``request``: what the user's rules and the defaults ask to keep and quantize."""
    engines = [get_engine(name) for name in dict.fromkeys(engine_names)]
    for engine in engines:
        refusal = engine.head_refusal(head)
        if refusal is not None:
            raise InputError(f"{engine.title} cannot load this head: {refusal}", hint="do not target this engine")
    names = [engine.name for engine in engines]
    notes = check_engines(scheme.kinds, scheme.name, fmt.name, names, head.attention, builtin_names_by_kinds())
    target = resolve_target_layers(target_layers, target_config, head.config)
    views = [EngineView.of(engine, head, fmt.name, scheme.kinds, target.count) for engine in engines]
    decided = plan_exclusions(head, views, fmt, scheme, request)
    return EnginePlan(engines, target, decided.excluded, decided.patterns, decided.verdicts, notes + decided.notes)
