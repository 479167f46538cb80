"""Writing exclusion rules that every targeted engine really applies, and proving it.

The rules are written against each engine's *runtime* module names (never checkpoint names, which
no engine sees). When the target's layer count is unknown, the layer index is written as ``\\d+`` and
the proof is run for several layer counts, so the rules hold whatever the target is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from eaglequant.common.errors import ExclusionProofError, InputError, Param, Words, given, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.engines.base import TARGET_LAYERS_HINT, LayerCountNeeded, RuntimeModule
from eaglequant.engines.keep import KeepRequest
from eaglequant.engines.refusal import EngineRefusal, Refusal, Refused
from eaglequant.engines.view import EngineView
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.detect import check_quantizable_dtype
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.model import Scheme


@dataclass(frozen=True)
class ModuleVerdict:
    engine: str
    runtime_name: str
    members: tuple[str, ...]
    quantized: bool
    rule: str | None  # the pattern that excluded it
    engine_reason: str | None = None  # why the engine runs it unquantized whatever the rules say


class LayerCountNeededError(InputError):
    """Exclusion rules that name a kept decoder module only with the target's layer count, which is unknown."""


class NothingQuantizedError(InputError):
    """A plan that would keep every linear in the source dtype."""


@dataclass(frozen=True)
class ExclusionPlan:
    excluded: dict[str, str]  # canonical linear -> why it keeps its source dtype
    patterns: list[str]  # the exclusion rules written into config.json
    verdicts: list[ModuleVerdict]  # how each engine treats each runtime module under them
    notes: list[Finding]  # linears the format cannot store, kept with their fused group (kept-unstorable)
    # runtime module -> the kinds it is stored in (None: run unquantized), by the first engine's runtime names, then
    # the names of the modules other engines run quantized: a per-module config names each module as every engine
    # that reads it does
    stored: dict[str, KindPair | None]


def plan_exclusions(
    head: HeadDescription,
    views: list[EngineView],
    fmt: Format,
    scheme: Scheme,
    request: KeepRequest,
    unstorable: Mapping[str, Finding],
    loading_formats: Sequence[Format] = (),
) -> ExclusionPlan:
    """The one decision of which linears stay in the source dtype, and why: what a targeted engine cannot run
    quantized, then the defaults and the user's rules, then what the format cannot store (with the rest of its
    fused group); then the rules that say it in each engine's dialect, proven for every engine. Refuses a plan
    that would quantize nothing. ``unstorable``: canonical linear -> why ``fmt`` cannot store it quantized;
    ``loading_formats``: the formats in which every targeted engine loads ``scheme``,
    offered when a ``quantize`` rule asks for a linear an engine keeps unquantized in ``fmt``."""
    required = engine_requirements(views)
    hint = _format_hint(views, request, required, loading_formats)
    excluded = merged_exclusions(head, request, required, hint)
    check_fused_exclusions(head, set(excluded))
    chosen = set(excluded)
    notes = _exclude_unstorable(head, unstorable, excluded, views)
    if all(lin.module in excluded for lin in head.linears):
        if any(lin.module not in chosen for lin in head.linears):
            raise NothingQuantizedError(
                f"{fmt.title} {scheme.name} can store none of this head's linears; nothing would be quantized "
                f"({notes[-1].message.removeprefix('kept ')})",
                hint="choose another scheme (eaglequant schemes lists them)",
            )
        raise NothingQuantizedError(
            "every linear is excluded; nothing would be quantized", hint=words("relax ", Param("exclude"))
        )
    quantized = [lin for lin in head.linears if lin.module not in excluded]
    infos = {t.name: t.info for t in head.tensors}
    for linear in quantized:  # a source already partly quantized is refused for what it is, before any rule
        check_quantizable_dtype(infos[linear.weight])
    patterns = synthesize_patterns(views, excluded)
    verdicts = prove(views, patterns, {lin.module for lin in quantized})
    return ExclusionPlan(excluded, patterns, verdicts, notes, _stored_kinds(views, verdicts))


def _stored_kinds(views: list[EngineView], verdicts: list[ModuleVerdict]) -> dict[str, KindPair | None]:
    first = views[0]
    stored: dict[str, KindPair | None] = {
        v.runtime_name: first.module_kinds.get(v.members[0], first.kinds) if v.quantized else None
        for v in verdicts
        if v.engine == first.engine.key
    }
    for v in verdicts:
        if v.quantized:
            stored[v.runtime_name] = first.module_kinds.get(v.members[0], first.kinds)
    return stored


def merged_exclusions(
    head: HeadDescription,
    request: KeepRequest,
    required: Mapping[str, str],
    formats_hint: Mapping[str, Words] | None = None,
) -> dict[str, str]:
    """Canonical linear -> why it keeps its source dtype: what an engine requires first (``required``: module ->
    the engine's reason), then what ``request`` asks. A ``quantize`` rule may lift a default, never a
    requirement; ``formats_hint``: module -> the formats in which every targeted engine would run it quantized,
    said in the refusal."""
    excluded: dict[str, str] = {}
    for module, reason in required.items():
        if module in request.quantized:
            raise InputError(
                words(
                    given(request.asked_by(module), request.quantized[module]),
                    f" asks to quantize {head.linear(module).checkpoint_module}, but {reason}",
                ),
                hint=words(
                    *(formats_hint or {}).get(module, ()),
                    "drop that ",
                    Param(request.asked_by(module)),
                    " rule, or the ",
                    Param("engines"),
                    " that cannot run it quantized",
                ),
            )
        excluded[module] = reason
    for module, reason in request.kept.items():
        excluded.setdefault(module, reason)
    return excluded


def _format_hint(
    views: list[EngineView],
    request: KeepRequest,
    required: Mapping[str, str],
    loading_formats: Sequence[Format],
) -> dict[str, Words]:
    """For each linear a ``quantize`` rule asks for that a targeted engine keeps unquantized in this format
    (``required``): the formats, among ``loading_formats`` (those in which every targeted engine loads the scheme),
    in which every targeted engine runs that linear quantized."""
    hints = {}
    for module in request.quantized:
        if module not in required:
            continue
        able: list[str | Param] = []
        for fmt in loading_formats:
            if fmt is views[0].format:
                continue
            others = [EngineView.of(v.engine, v.head, fmt, v.kinds, v.target_layers, v.module_kinds) for v in views]
            if module not in engine_requirements(others):
                able += [" or "] * bool(able) + [suggested("format", fmt.name)]
        engines = ", ".join(view.engine.title for view in views)
        said = f"no format lets {engines} run it quantized with this scheme: "
        hints[module] = words(*able, f" runs it quantized in {engines}; or ") if able else words(said)
    return hints


def engine_requirements(views: list[EngineView]) -> dict[str, str]:
    """Canonical linear -> why a targeted engine needs it kept unquantized in the checkpoint (it runs the module
    unquantized whatever the config says, or cannot load it quantized)."""
    required: dict[str, str] = {}
    for view in views:
        for module, reason in view.kept_reasons.items():
            for member in module.members:
                required.setdefault(member, reason)
    return required


def _exclude_unstorable(
    head: HeadDescription, unstorable: Mapping[str, Finding], excluded: dict[str, str], views: list[EngineView]
) -> list[Finding]:
    """Keep in the source dtype every linear the format cannot store (``unstorable``: module -> why) and the rest
    of its fused group; one note for each (``kept-unstorable``, about the linear's checkpoint module), said in the
    checkpoint's names with the engines' name for a fused module beside them."""
    notes = []
    for linear in head.linears:
        problem = unstorable.get(linear.module)
        if linear.module in excluded or problem is None:
            continue
        group = head.group_of(linear.module)
        members = group.members if group else (linear.module,)
        for member in members:
            excluded.setdefault(
                member,
                problem.message if member == linear.module else fused_reason(head, linear.module, problem.message),
            )
        fused = runtime_spellings(views, members)
        run_as = f" (one module at run time: {fused})" if fused else ""
        why = f"{linear.checkpoint_module}'s {problem}" if len(members) > 1 else problem
        kept = f"kept {checkpoint_names(head, members)} unquantized{run_as}: {why}"
        notes.append(Finding("kept-unstorable", linear.checkpoint_module, kept))
    return notes


def synthesize_patterns(views: list[EngineView], excluded: Mapping[str, str]) -> list[str]:
    """Patterns (in each engine's syntax for the output format), one per runtime spelling of every module
    whose members are all excluded (``excluded``: canonical linear -> why it is kept unquantized)."""
    patterns: list[str] = []
    chosen = set(excluded)
    for view in views:
        any_layer = view.target_layers is None
        for count in view.counts:
            modules = view.modules(count)
            _refuse_shared_names(view, modules, chosen)
            if any_layer:
                _refuse_unwritable(view, modules, excluded, count)
            for module in modules:
                if not set(module.members) <= chosen:
                    continue
                for name in module.names:
                    for pattern in view.dialect.write(name, any_layer):
                        if any_layer:
                            _refuse_layer_dependent(view, pattern, modules, chosen, name, count)
                        if pattern not in patterns:
                            patterns.append(pattern)
    return patterns


FUSED_WITH = "fused with "  # how a fused member's reason starts when another member cannot be stored


def fused_reason(head: HeadDescription, cause: str, problem: str) -> str:
    """Why a fused member is kept because ``cause``, a member of its group, cannot be stored."""
    return f"{FUSED_WITH}{head.linear(cause).checkpoint_module}: {problem}"


def checkpoint_names(head: HeadDescription, members: Iterable[str]) -> str:
    """Canonical linears as the checkpoint names them (``midlayer.self_attn.q_proj``): what users read and write."""
    return ", ".join(head.linear(m).checkpoint_module for m in members)


def why_kept(head: HeadDescription, members: tuple[str, ...], excluded: Mapping[str, str]) -> str:
    """Why ``members`` (one runtime module) are kept unquantized, each reason once, naming the linear it is about
    where they differ (a fused group's members kept for one member's shape say it once)."""
    said: dict[str, list[str]] = {}
    for member in members:
        reason = excluded.get(member, "")
        if not reason.startswith(FUSED_WITH):
            said.setdefault(reason, []).append(member)
    if len(said) == 1 and len(next(iter(said.values()))) == len(members):
        return next(iter(said))
    if not said:
        return excluded.get(members[0], "")
    return "; ".join(f"{checkpoint_names(head, names)}: {reason}" for reason, names in said.items())


def runtime_spellings(views: list[EngineView], members: tuple[str, ...]) -> str:
    """How each engine names the one module that computes ``members`` at run time (``vLLM's
    model.layers.{L}.self_attn.qkv_proj, SGLang's model.qkv_proj``); empty when no engine fuses them."""
    spelled = []
    for view in views:
        count = view.counts[-1]  # the known count, or the largest sample
        for module in view.modules(count):
            if set(module.members) == set(members) and len(members) > 1:
                name = module.names[0] if view.target_layers is not None else symbolic_name(module.names[0], count)
                spelled.append(f"{view.engine.title}'s {name}")
    return ", ".join(spelled)


def _refuse_unwritable(view: EngineView, modules: list[RuntimeModule], excluded: Mapping[str, str], count: int) -> None:
    """An engine that matches exact names (vLLM reading a native fp8 config) can exclude a decoder module only with
    the target's layer count: say what is kept and why, how the engine names it, and what N is."""
    if view.dialect.any_layer:
        return
    head = view.head
    blocked: list[tuple[RuntimeModule, LayerCountNeeded]] = []
    for module in modules:
        if set(module.members) <= set(excluded):
            needed = next(filter(None, map(view.dialect.layer_count_needed, module.names)), None)
            if needed is not None:
                blocked.append((module, needed))
    if not blocked:
        return
    kept = "; ".join(f"{checkpoint_names(head, m.members)} ({why_kept(head, m.members, excluded)})" for m, _ in blocked)
    names = ", ".join(symbolic_name(m.names[0], count) for m, _ in blocked)
    raise LayerCountNeededError(
        f"{kept} {'is' if len(blocked) == 1 and len(blocked[0][0].members) == 1 else 'are'} kept unquantized; "
        f"{blocked[0][1].why}, so the rule must name {names}, L being the target's layer count",
        hint=TARGET_LAYERS_HINT,
    )


def _refuse_shared_names(view: EngineView, modules: list[RuntimeModule], excluded: set[str]) -> None:
    """An engine that names several draft layers alike (SGLang) can only exclude all of them or none."""
    head, engine = view.head, view.engine
    seen: dict[str, RuntimeModule] = {}
    for module in modules:
        for name in module.names:
            other = seen.setdefault(name, module)
            if (set(other.members) <= excluded) != (set(module.members) <= excluded):
                kept, quantized = (other, module) if set(other.members) <= excluded else (module, other)
                raise InputError(
                    f"{engine.title} names {checkpoint_names(head, kept.members)} and "
                    f"{checkpoint_names(head, quantized.members)} alike ({name}), so it cannot keep the first "
                    "unquantized and quantize the second",
                    hint="exclude the same modules in every draft layer, or do not target this engine",
                )


def _refuse_layer_dependent(
    view: EngineView, pattern: str, modules: list[RuntimeModule], excluded: set[str], name: str, count: int
) -> None:
    """A layer-independent pattern must not also catch the same module of a layer that stays quantized."""
    head, engine = view.head, view.engine
    for other in modules:
        if set(other.members) <= excluded:
            continue
        if any(view.dialect.match(n, [pattern]) for n in other.names):
            module = next(m for m in modules if name in m.names)
            raise InputError(
                f"keeping {checkpoint_names(head, module.members)} unquantized but quantizing "
                f"{checkpoint_names(head, other.members)} can only be written for {engine.title} with the target's "
                f"layer count L: it names them {symbolic_name(name, count)} and "
                f"{symbolic_name(other.names[0], count)} (the draft's layers are numbered after the target's)",
                hint=TARGET_LAYERS_HINT,
            )


def prove(views: list[EngineView], patterns: list[str], quantized: set[str]) -> list[ModuleVerdict]:
    """Run each engine's matching rule over its runtime names; fail on any module not treated as intended."""
    verdicts: list[ModuleVerdict] = []
    for view in views:
        head, engine, fmt, counts = view.head, view.engine, view.format, view.counts
        for problem in engine.pattern_problems(head, fmt, patterns, view.kinds):
            raise ExclusionProofError(problem, hint="report this as a bug in eaglequant")
        for count in counts:
            for module in view.modules(count):
                reason = view.unquantized_by_engine(module)
                needed = view.quantized_needs.get(module)
                if needed is not None and not set(module.members) <= quantized:
                    kept = checkpoint_names(head, sorted(set(module.members) - quantized))
                    raise EngineRefusal(
                        Refusal(engine, Refused.KEPT, needed, kept),
                        f"{engine.title} cannot load {symbolic_name(module.names[0], count)} unquantized under this "
                        f"scheme ({needed}), but it is kept unquantized for {kept}",
                        hint=words(
                            "drop the ",
                            Param("exclude"),
                            " that keeps it, or target the engines that need it kept in separate conversions",
                        ),
                    )
                if reason is not None and set(module.members) & quantized:
                    raise ExclusionProofError(
                        f"{engine.title} runs {module.names[0]} unquantized ({reason}) but the plan quantizes "
                        f"{checkpoint_names(head, sorted(set(module.members) & quantized))}",
                        hint="report this as a bug in eaglequant",
                    )
                intended = reason is None and set(module.members) <= quantized
                rules = [view.dialect.match(name, patterns) for name in module.names]
                for name, rule in zip(module.names, rules, strict=True):
                    applied = reason is None and rule is None
                    if applied != intended:
                        want = "quantized" if intended else "kept unquantized"
                        got = f"excluded by {rule!r}" if rule else "matched by no exclusion rule"
                        raise ExclusionProofError(
                            f"{engine.title} would not apply the intended scheme to {name}: it should be {want} "
                            f"but is {got}",
                            hint="report this as a bug in eaglequant",
                        )
                if count == counts[-1]:
                    shown = module.names[0] if view.target_layers is not None else symbolic_name(module.names[0], count)
                    verdicts.append(ModuleVerdict(engine.key, shown, module.members, intended, rules[0], reason))
    return verdicts


def symbolic_name(runtime_name: str, target_layers: int) -> str:
    """``model.layers.95.mlp.down_proj`` -> ``model.layers.{L+1}.mlp.down_proj`` (L = target's layer count)."""

    def replace(match: re.Match[str]) -> str:
        offset = int(match.group(1)) - target_layers
        return f"model.layers.{{L{f'+{offset}' if offset else ''}}}."

    return re.sub(r"^model\.layers\.(\d+)\.", replace, runtime_name)


def check_fused_exclusions(head: HeadDescription, excluded: set[str]) -> None:
    """Engines run fused members (q/k/v, gate/up, q_a/kv_a) as one module with one scheme."""
    for group in head.fused_groups:
        chosen = [m for m in group.members if m in excluded]
        if chosen and len(chosen) != len(group.members):
            kept = [m for m in group.members if m not in excluded]
            names = {m: head.linear(m).checkpoint_module for m in group.members}  # as the user writes them
            raise InputError(
                f"excluding {', '.join(names[m] for m in chosen)} but quantizing {', '.join(names[m] for m in kept)}: "
                f"engines fuse them into one {group.module_type} module that must use a single scheme",
                hint=f"exclude all of {', '.join(names.values())}, or none of them",
            )
