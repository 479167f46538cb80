"""Deciding what a conversion does before any weight is read.

A :class:`ConversionPlan` lists every output tensor (quantized or copied), why each linear is kept, the config
written into config.json (its groups and exclusion rules) and the engines' verdict on them. ``inspect`` shows a
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
from eaglequant.common.findings import Finding
from eaglequant.conversion.outputs import OutputTensor, planned_outputs
from eaglequant.conversion.request import ConversionRequest, changed_config
from eaglequant.engines import Engine
from eaglequant.engines.exclusions import ModuleVerdict
from eaglequant.engines.keep import user_request
from eaglequant.engines.planning import plan_engines
from eaglequant.engines.target import TargetModel
from eaglequant.formats import FORMATS, Format
from eaglequant.formats.base import ConfigFiles
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.layouts.head import HeadDescription, HeadLinear, Role
from eaglequant.readback.cost import RoundCost, round_cost
from eaglequant.schemes import Scheme
from eaglequant.schemes.assignment import SchemeAssignment

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
    config: QuantConfig  # what config.json declares: the schemes' groups by runtime names, and the exclusions
    verdicts: list[ModuleVerdict] = field(default_factory=list)
    input_amax: dict[str, float] = field(default_factory=dict)  # calibrated activation amax per linear
    notes: list[Finding] = field(default_factory=list)  # what the user should know: downgrades, layers kept
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

    def config_files(self) -> ConfigFiles:
        """config.json's ``quantization_config`` and the format's JSON files beside it."""
        return self.format.write_config(self.config)

    def written_config(self, source_config: dict[str, Any]) -> dict[str, Any]:
        """config.json as written: the source's, with the planned changes and the quantization config."""
        quantization = self.config_files().quantization_config
        return {**changed_config(source_config, self.config_changes), "quantization_config": quantization}


def build_plan(
    head: HeadDescription, request: ConversionRequest, *, input_amax: dict[str, float] | None = None
) -> ConversionPlan:
    """The plan for converting ``head`` as ``request`` asks; ``input_amax``: the calibrated activation amax per
    linear (see :mod:`eaglequant.draft.calibrate`), which only a scheme with calibrated activations is given
    (:class:`~eaglequant.conversion.options.ConversionOptions` refuses ``calib`` for the others)."""
    notes: list[Finding] = []
    assignment, keep = user_request(
        head, request.exclude, request.quantize, request.assignment, calibrated=bool(input_amax), notes=notes
    )
    fmt = request.format
    storage = fmt.storage(head, assignment, FORMATS.values())
    decided = plan_engines(head, fmt, assignment, request.engines, keep, storage, request.target)
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
    return ConversionPlan(
        head,
        assignment,
        fmt,
        decided.engines,
        decided.target,
        quantized,
        kept,
        planned_outputs(head, storage, quantized),
        decided.patterns,
        decided.config,
        decided.verdicts,
        amax,
        notes + decided.notes + serving,
        changes,
    )
