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
from eaglequant.engines.support import engine_support
from eaglequant.engines.target import TargetModel, resolve_target
from eaglequant.engines.view import EngineView
from eaglequant.formats.base import Format, HeadStorage
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment


@dataclass(frozen=True)
class EnginePlan:
    engines: list[Engine]
    target: TargetModel
    excluded: dict[str, str]  # canonical linear -> why it keeps its source dtype
    patterns: list[str]  # the exclusion rules written into config.json
    verdicts: list[ModuleVerdict]
    notes: list[str]  # the conditions under which the engines load it, the linears the format cannot store
    mixed_refusals: list[str]  # why an engine cannot load linears of different kinds from one checkpoint


def plan_engines(
    head: HeadDescription,
    fmt: Format,
    assignment: SchemeAssignment,
    engine_names: Sequence[str],
    request: KeepRequest,
    storage: HeadStorage,
    *,
    target_layers: int | None = None,
    target_config: str | Path | None = None,
) -> EnginePlan:
    """Refuse what a targeted engine cannot load (the head, or the schemes in ``fmt``), then decide and prove the
    exclusions for every engine. ``request``: what the user's rules and the defaults ask to keep and quantize;
    ``storage``: how ``fmt`` stores each linear, or why it cannot."""
    engines = [get_engine(name) for name in dict.fromkeys(engine_names)]
    for engine in engines:
        refusal = engine.head_refusal(head)
        if refusal is not None:
            raise InputError(f"{engine.title} cannot load this head: {refusal}", hint="do not target this engine")
    supported = engine_support(engines, fmt.name, assignment, head.attention)
    target = resolve_target(target_layers, target_config, head.config)
    scheme = assignment.main
    module_kinds = {module: ruled.kinds for module, ruled in assignment.module_schemes.items()}
    views = [EngineView.of(engine, head, fmt.name, scheme.kinds, target.count, module_kinds) for engine in engines]
    decided = plan_exclusions(head, views, fmt, scheme, request, storage.problems, supported.loading_formats)
    notes = supported.notes + decided.notes
    return EnginePlan(
        engines, target, decided.excluded, decided.patterns, decided.verdicts, notes, supported.mixed_refusals
    )
