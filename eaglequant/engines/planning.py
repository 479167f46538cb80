"""The engines' part of a plan, decided in one call: what the engine releases targeted refuse, one view of each
engine (its runtime modules named after the target's layers), which linears stay in the source dtype and why, the
exclusion rules written in each engine's dialect and proven against each engine's matching, and the config the
format writes (:class:`QuantConfig`), its groups proven against each engine's reading of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eaglequant.common.errors import ExclusionProofError, InputError, suggested, words
from eaglequant.engines import Engine
from eaglequant.engines.base import TARGET_LAYERS_HINT
from eaglequant.engines.exclusions import KeepRequest, ModuleVerdict, plan_exclusions
from eaglequant.engines.module_support import MODULE_QUESTIONS, ModuleRequest, check_module_request
from eaglequant.engines.support import engine_support
from eaglequant.engines.target import TargetModel
from eaglequant.engines.view import EngineView
from eaglequant.formats import FORMATS
from eaglequant.formats.base import Format, HeadStorage
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.kinds import KindPair
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
        refusal = engine.head_refusal(head)
        if refusal is not None:
            raise InputError(f"{engine.title} cannot load this head: {refusal}", hint="do not target this engine")
    asked = tuple(module for module in MODULE_QUESTIONS if module in request.quantized)
    if asked or assignment.mixed:
        kinds = tuple(scheme.kinds for scheme in assignment.schemes)
        wanted = ModuleRequest(kinds, asked, assignment.mixed)
        check_module_request(engines, fmt, wanted, head.attention, assignment.describe())
    supported = engine_support(engines, fmt, assignment, head.attention)
    scheme = assignment.main
    module_kinds = {module: ruled.kinds for module, ruled in assignment.module_schemes.items()}
    views = [EngineView.of(engine, head, fmt, scheme.kinds, target.count, module_kinds) for engine in engines]
    decided = plan_exclusions(head, views, fmt, scheme, request, storage.problems, supported.loading_formats)
    notes = supported.notes + decided.notes
    check_assignment(fmt, assignment, storage, supported.mixed_refusals, target)
    stored = runtime_kinds(engines, decided.verdicts, assignment)
    config = fmt.config_for(stored, decided.patterns, scheme.kinds)
    prove_groups(config, fmt, decided.verdicts, assignment)
    return EnginePlan(engines, target, decided.excluded, decided.patterns, decided.verdicts, notes, config)


class ModuleSchemesNeedLayerCount(InputError):
    """Per-module entries cannot be written without the target's layer count (``search`` counts what it skips)."""


def check_assignment(
    fmt: Format, assignment: SchemeAssignment, storage: HeadStorage, mixed_refusals: list[str], target: TargetModel
) -> None:
    """Refuse what cannot be written or served as ``assignment`` asks: a linear a rule gives a scheme that ``fmt``
    cannot store it in (``storage``), then, for linears of different kinds, a format or an engine that does not hold
    per-module kinds (``mixed_refusals``), or an unknown target layer count (per-module entries name each module as
    the engine does, layer index included)."""
    for module, rule in assignment.by_module.items():
        problem = storage.problems.get(module)
        if problem is not None:
            raise InputError(words(suggested("scheme_for", rule.text), f": {problem}"))
    if not assignment.mixed:
        return
    if not fmt.stores_mixed:
        able = ", ".join(f.name for f in FORMATS.values() if f.stores_mixed)
        raise InputError(
            f"{fmt.title} cannot store linears of different kinds in one checkpoint ({assignment.describe()})",
            hint=f"formats that can: {able}" if able else "give every linear one scheme",
        )
    if mixed_refusals:
        raise InputError(
            f"{mixed_refusals[0]} ({assignment.describe()})",
            hint="target only engines that do (docs/cli.md#per-module-schemes), or one scheme for all",
        )
    if target.count is None:
        raise ModuleSchemesNeedLayerCount(
            f"{fmt.title}'s per-module entries name each module as the engine does, after the target's layers, so "
            "writing them needs the target's layer count",
            hint=TARGET_LAYERS_HINT,
        )


def runtime_kinds(
    engines: Sequence[Engine], verdicts: Sequence[ModuleVerdict], assignment: SchemeAssignment
) -> dict[str, KindPair | None]:
    """Each runtime module -> the kinds it is stored in (None: run unquantized), by the first engine's runtime names,
    then the names of the modules other engines run quantized (a per-module config names each module as every engine
    that reads it does)."""
    first = engines[0].key
    found: dict[str, KindPair | None] = {
        v.runtime_name: assignment.of(v.members[0]).kinds if v.quantized else None
        for v in verdicts
        if v.engine == first
    }
    for v in verdicts:
        if v.quantized:
            found[v.runtime_name] = assignment.of(v.members[0]).kinds
    return found


def prove_groups(
    config: QuantConfig, fmt: Format, verdicts: Sequence[ModuleVerdict], assignment: SchemeAssignment
) -> None:
    """Each targeted engine's reader of ``config`` (the format's group matching) gives every module it runs quantized
    the kinds it is stored in."""
    if not config.per_module:
        return
    for verdict in verdicts:
        if not verdict.quantized:
            continue
        given = config.kinds_for((verdict.runtime_name,), fmt.matches_target)
        stored = assignment.of(verdict.members[0]).kinds
        if given != stored:
            raise ExclusionProofError(
                f"{verdict.engine} would read {verdict.runtime_name} as {given} from the {fmt.title} config, but it "
                f"is stored as {stored}",
                hint="report this as a bug in eaglequant",
            )
