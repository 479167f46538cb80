"""Deciding what a conversion does before any weight is read.

A :class:`ConversionPlan` lists every output tensor (quantized or copied), why each linear is kept,
the exclusion rules written into config.json and the engines' verdict on them. ``inspect`` shows a
plan; ``convert`` executes one. Building a plan reads headers only: from one
:class:`~eaglequant.conversion.request.ConversionRequest` (every name already resolved), the user's rules are matched,
then the engines' part is decided in one call (:func:`eaglequant.engines.planning.plan_engines`), then the outputs
listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.config_change import ConfigChange
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.errors import InputError, given, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.conversion.outputs import OutputTensor, planned_outputs
from eaglequant.conversion.request import ConversionRequest, changed_config
from eaglequant.engines import Engine
from eaglequant.engines.base import TARGET_LAYERS_HINT
from eaglequant.engines.exclusions import ExclusionProofError, KeepRequest, ModuleVerdict
from eaglequant.engines.planning import EnginePlan, plan_engines
from eaglequant.engines.target import TargetModel
from eaglequant.formats import FORMATS, Format
from eaglequant.formats.base import ConfigFiles, HeadStorage
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import HeadDescription, HeadLinear, Role
from eaglequant.layouts.rules import linears_matching
from eaglequant.readback.cost import RoundCost, round_cost
from eaglequant.schemes import Scheme
from eaglequant.schemes.assignment import SchemeAssignment

# Linears kept in the source dtype unless the user asks otherwise, and why.
DEFAULT_EXCLUSIONS: dict[str, str] = {
    "fc": "default: fc reads the target's hidden states (--quantize fc to quantize it)",
    "lm_head": "default: the draft's logits decide acceptance (--quantize lm_head to quantize it)",
}
NON_LINEAR_REASONS = {
    Role.NORM: "norm (never quantized)",
    Role.EMBEDDING: "embedding (never quantized)",
    Role.VOCAB_MAP: "vocabulary map (copied as is)",
    Role.BIAS: "bias (copied as is)",
    Role.OTHER: "not part of the known layout (copied as is)",
}


@dataclass
class ConversionPlan:
    head: HeadDescription
    assignment: SchemeAssignment  # each linear's scheme, resolved on the head
    format: Format
    engines: list[Engine]
    target: TargetModel
    quantized: list[HeadLinear]
    kept: dict[str, str]  # checkpoint tensor name -> why it keeps its source dtype
    outputs: list[OutputTensor]
    exclude_patterns: list[str]
    verdicts: list[ModuleVerdict] = field(default_factory=list)
    input_amax: dict[str, float] = field(default_factory=dict)  # calibrated activation amax per linear
    notes: list[str] = field(default_factory=list)  # what the user should know: downgrades, layers kept
    config_changes: list[ConfigChange] = field(default_factory=list)  # config.json values written other than SRC's

    @property
    def scheme(self) -> Scheme:
        """The main scheme: that of every linear no ``scheme_for`` rule gives another."""
        return self.assignment.main

    def scheme_of(self, module: str) -> Scheme:
        """The scheme the canonical ``module`` is stored in."""
        return self.assignment.of(module)

    def quantized_specs(self, module: str) -> dict[str, TensorSpec]:
        """The tensors the quantized canonical ``module`` is written as, by name, as the format planned them."""
        return {o.spec.name: o.spec for o in self.outputs if o.quantized_from == module}

    def scale_group(self, module: str) -> tuple[str, ...]:
        """The linears that share ``module``'s global and input scales: its fused group when quantized."""
        group = self.head.group_of(module)
        quantized = {lin.module for lin in self.quantized}
        if group is not None and set(group.members) <= quantized:
            return group.members
        return (module,)

    @property
    def excluded_linears(self) -> dict[str, str]:
        """Checkpoint weight name -> why that linear keeps its source dtype."""
        quantized = {lin.weight for lin in self.quantized}
        return {lin.weight: self.kept[lin.weight] for lin in self.head.linears if lin.weight not in quantized}

    @property
    def output_bytes(self) -> int:
        return sum(t.spec.nbytes for t in self.outputs)

    def stored_bytes(self) -> dict[str, int]:
        """Canonical quantized linear -> the bytes of every tensor written for it (weight, scales, zero points)."""
        stored: dict[str, int] = {}
        for output in self.outputs:
            if output.quantized_from is not None:
                stored[output.quantized_from] = stored.get(output.quantized_from, 0) + output.spec.nbytes
        return stored

    def round_costs(self, draft_tokens: int = DEFAULT_DRAFT_TOKENS) -> list[RoundCost]:
        """Per targeted engine, the weight bytes a speculative round of ``draft_tokens`` reads, as that engine runs
        each module (:mod:`eaglequant.readback.cost`)."""
        stored = self.stored_bytes()
        costs = []
        for engine in self.engines:
            runs_quantized = {
                member
                for verdict in self.verdicts
                if verdict.engine == engine.key and verdict.quantized
                for member in verdict.members
            }
            quantized = {module: stored[module] for module in runs_quantized if module in stored}
            costs.append(round_cost(self.head, engine.key, engine.release, quantized, draft_tokens))
        return costs

    def quant_config(self) -> QuantConfig:
        """The config the format writes: the schemes' kinds by the engines' runtime names, and the exclusion rules."""
        return self.format.config_for(self.runtime_kinds(), self.exclude_patterns, self.scheme.kinds)

    def config_files(self) -> ConfigFiles:
        """config.json's ``quantization_config`` and the format's JSON files beside it."""
        return self.format.write_config(self.quant_config())

    def runtime_kinds(self) -> dict[str, KindPair | None]:
        """Each runtime module -> the kinds it is stored in (None: run unquantized), by the first targeted engine's
        runtime names, then the names of the modules other engines run quantized (a per-module config names each
        module as every engine that reads it does)."""
        first = self.engines[0].key
        found: dict[str, KindPair | None] = {
            v.runtime_name: self.scheme_of(v.members[0]).kinds if v.quantized else None
            for v in self.verdicts
            if v.engine == first
        }
        for v in self.verdicts:
            if v.quantized:
                found[v.runtime_name] = self.scheme_of(v.members[0]).kinds
        return found

    def written_config(self, source_config: dict[str, Any]) -> dict[str, Any]:
        """config.json as written: the source's, with the planned changes and the quantization config."""
        quantization = self.config_files().quantization_config
        return {**changed_config(source_config, self.config_changes), "quantization_config": quantization}


def requested_exclusions(
    head: HeadDescription,
    exclude: list[str] | tuple[str, ...] = (),
    quantize: list[str] | tuple[str, ...] = (),
    assignment: SchemeAssignment | None = None,
) -> KeepRequest:
    """What the defaults (fc, lm_head) and the user's rules ask to keep and to quantize. ``quantize`` rules, and the
    ``scheme_for`` rules of ``assignment`` (resolved on ``head``), lift the defaults; ``exclude`` rules add to them.
    Each rule must match at least one linear, and no linear may be both quantized and excluded by the user."""
    matched = linears_matching(head, {"quantize": quantize, "exclude": exclude})
    opted_in = {lin.module: rule for rule, hits in matched["quantize"] for lin in hits}
    ruled = {} if assignment is None else {module: rule.pattern for module, rule in assignment.by_module.items()}
    opted_in.update(ruled)
    kept = {
        module: reason
        for module, reason in DEFAULT_EXCLUSIONS.items()
        if module not in opted_in and any(lin.module == module for lin in head.linears)
    }
    for rule, hits in matched["exclude"]:
        for lin in hits:
            if lin.module in opted_in:
                raise InputError(
                    words(
                        f"{lin.checkpoint_module} is matched by ",
                        given("quantize", opted_in[lin.module]),
                        " and ",
                        given("exclude", rule),
                    ),
                    hint="keep one of the two rules",
                )
            kept.setdefault(lin.module, f"--exclude {rule}")
    return KeepRequest(kept, opted_in, frozenset(ruled))


def build_plan(
    head: HeadDescription, request: ConversionRequest, *, input_amax: dict[str, float] | None = None
) -> ConversionPlan:
    """The plan for converting ``head`` as ``request`` asks; ``input_amax``: the calibrated activation amax per
    linear (see :mod:`eaglequant.draft.calibrate`), which only a scheme with calibrated activations is given
    (:class:`~eaglequant.conversion.options.ConversionOptions` refuses ``calib`` for the others)."""
    notes: list[str] = []
    assignment = written_assignment(request.assignment, input_amax, notes).resolved(head)
    keep = requested_exclusions(head, request.exclude, request.quantize, assignment)
    fmt = request.format
    storage = fmt.storage(head, assignment, FORMATS.values())
    decided = plan_engines(head, fmt, assignment, request.engines, keep, storage, request.target)
    check_assignment(fmt, assignment, storage, decided)
    quantized = [lin for lin in head.linears if lin.module not in decided.excluded]
    quantized_weights = {lin.weight for lin in quantized}
    kept = {
        t.name: decided.excluded[t.module] if t.role is Role.LINEAR else NON_LINEAR_REASONS[t.role]
        for t in head.tensors
        if t.name not in quantized_weights
    }
    calibrated = {lin.module for lin in quantized if assignment.of(lin.module).needs_calibration}
    amax = {m: v for m, v in (input_amax or {}).items() if m in calibrated}
    changes = list(request.config_changes)
    served = replace(head, config=changed_config(head.config, changes))  # the head as the engines will read it
    serving = [note for engine in decided.engines for note in engine.draft_notes(served, decided.target)]
    plan = ConversionPlan(
        head,
        assignment,
        fmt,
        decided.engines,
        decided.target,
        quantized,
        kept,
        planned_outputs(head, storage, quantized),
        decided.patterns,
        decided.verdicts,
        amax,
        notes + decided.notes + serving,
        changes,
    )
    check_groups(plan)
    return plan


class ModuleSchemesNeedLayerCount(InputError):
    """Per-module entries cannot be written without the target's layer count (``search`` counts what it skips)."""


def check_assignment(fmt: Format, assignment: SchemeAssignment, storage: HeadStorage, decided: EnginePlan) -> None:
    """Refuse what cannot be written or served as ``assignment`` asks: a linear a rule gives a scheme that ``fmt``
    cannot store it in (``storage``), then, for linears of different kinds, a format or an engine that does not hold
    per-module kinds, or an unknown target layer count (per-module entries name each module as the engine does,
    layer index included; ``decided``: the engines' part of the plan)."""
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
    if decided.mixed_refusals:
        raise InputError(
            f"{decided.mixed_refusals[0]} ({assignment.describe()})",
            hint="target only engines that do (docs/cli.md#per-module-schemes), or one scheme for all",
        )
    if decided.target.count is None:
        raise ModuleSchemesNeedLayerCount(
            f"{fmt.title}'s per-module entries name each module as the engine does, after the target's layers, so "
            "writing them needs the target's layer count",
            hint=TARGET_LAYERS_HINT,
        )


def check_groups(plan: ConversionPlan) -> None:
    """Each targeted engine's reader of the written config (the format's group matching) gives every module it runs
    quantized the kinds the plan stores it in."""
    config = plan.quant_config()
    if not config.per_module:
        return
    for verdict in plan.verdicts:
        if not verdict.quantized:
            continue
        given = config.kinds_for((verdict.runtime_name,), plan.format.matches_target)
        stored = plan.scheme_of(verdict.members[0]).kinds
        if given != stored:
            raise ExclusionProofError(
                f"{verdict.engine} would read {verdict.runtime_name} as {given} from the {plan.format.title} config, "
                f"but it is stored as {stored}",
                hint="report this as a bug in eaglequant",
            )


def written_assignment(
    assignment: SchemeAssignment, input_amax: dict[str, float] | None, notes: list[str] | None = None
) -> SchemeAssignment:
    """``assignment`` as it is written: a scheme with calibrated activations is written without them when there is
    no ``input_amax`` (the one calibration rule; ``notes`` gains a finding for each)."""
    found: list[str] = [] if notes is None else notes
    return assignment.mapped(lambda scheme: _effective_scheme(scheme, input_amax, found))


def _effective_scheme(scheme: Scheme, input_amax: dict[str, float] | None, notes: list[str]) -> Scheme:
    """``scheme`` as it is written: without its calibrated activations when there is no ``input_amax`` (with a note,
    ``no-calib-data``, about the scheme)."""
    if scheme.needs_calibration and not input_amax:
        written = scheme.without_calibration()
        text = (
            f"{scheme.name}: no --calib data, so activations are not quantized: written as {written.label} "
            f"(weight-only); pass --calib to get {scheme.label}"
        )
        notes.append(Finding("no-calib-data", scheme.name, text))
        return written
    return scheme
