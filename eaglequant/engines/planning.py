"""The engines' part of a plan, decided in one call: what the engine releases targeted refuse, one view of each
engine (its runtime modules named after the target's layers), which linears stay in the source dtype and why, the
exclusion rules written in each engine's dialect and proven against each engine's matching, and the config the
format writes (:class:`QuantConfig`), its groups proven against each engine's reading of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eaglequant.common.findings import Finding
from eaglequant.engines import Engine
from eaglequant.engines.exclusions import ModuleVerdict, plan_exclusions
from eaglequant.engines.keep import KeepRequest
from eaglequant.engines.refusal import EngineRefusal, Refusal, Refused
from eaglequant.engines.support import MODULE_QUESTIONS, draft_refusal, engine_support
from eaglequant.engines.target import TargetModel
from eaglequant.engines.view import EngineView
from eaglequant.formats.base import Format, HeadStorage
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment


@dataclass(frozen=True)
class EnginePlan:
    engines: list[Engine]
    target: TargetModel
    excluded: dict[str, str]  # canonical linear -> why it keeps its source dtype
    patterns: list[str]  # the exclusion rules written into config.json
    verdicts: list[ModuleVerdict]
    notes: list[Finding]  # the conditions under which the engines load it, the linears the format cannot store
    config: QuantConfig  # what the format writes: the schemes' groups by runtime names, and the exclusion rules


def plan_engines(
    head: HeadDescription,
    fmt: Format,
    assignment: SchemeAssignment,
    releases: Sequence[Engine],
    request: KeepRequest,
    storage: HeadStorage,
    target: TargetModel,
) -> EnginePlan:
    """Refuse what a targeted engine release (``releases``) cannot load (the head, or the schemes in ``fmt``), then
    decide and prove the exclusions for every engine. ``request``: what the user's rules and the defaults ask to keep
    and quantize; ``storage``: how ``fmt`` stores each linear, or why it cannot; ``target``: the target's layer
    count, which names the engines' runtime modules."""
    engines = list(dict.fromkeys(releases))
    for engine in engines:
        refusal = draft_refusal(engine, head, fmt, assignment.main.kinds)
        if refusal is not None:
            raise EngineRefusal(
                Refusal(engine, Refused.HEAD, refusal),
                f"{engine.title} cannot load this head: {refusal}",
                hint="do not target this engine",
            )
    asked = tuple(module for module in MODULE_QUESTIONS if module in request.quantized)
    supported = engine_support(engines, fmt, assignment, head.attention, storage, target, asked)
    scheme = assignment.main
    module_kinds = {module: ruled.kinds for module, ruled in assignment.module_schemes.items()}
    views = [EngineView.of(engine, head, fmt, scheme.kinds, target.count, module_kinds) for engine in engines]
    decided = plan_exclusions(head, views, fmt, scheme, request, storage.problems, supported.loading_formats)
    notes = supported.notes + decided.notes
    config = QuantConfig.of(
        decided.stored, decided.patterns, scheme.kinds, default_group=not fmt.names_every_module,
        read_as=fmt.matches_target,
    )  # fmt: skip
    return EnginePlan(engines, target, decided.excluded, decided.patterns, decided.verdicts, notes, config)
