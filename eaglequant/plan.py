"""Deciding what a conversion does before any weight is read.

A :class:`ConversionPlan` lists every output tensor (quantized or copied), why each linear is kept,
the exclusion rules written into config.json and the engines' verdict on them. ``inspect`` shows a
plan; ``convert`` executes one. Building a plan reads headers only.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.engines import Engine, get_engine
from eaglequant.engines.exclusions import ModuleVerdict, check_fused_groups, prove, synthesize_patterns
from eaglequant.engines.support import check_engines
from eaglequant.errors import InputError
from eaglequant.formats import FORMATS, Format, get_format
from eaglequant.layouts.detect import check_quantizable_dtype
from eaglequant.layouts.head import HeadDescription, HeadLinear, HeadTensor, Role
from eaglequant.schemes import Scheme
from eaglequant.schemes.model import builtin_scheme_names, load_scheme

# Linears kept in the source dtype unless the user asks otherwise, and why.
DEFAULT_EXCLUSIONS: dict[str, str] = {
    "fc": "default: fc mixes the target's hidden states and is small; SGLang runs it unquantized",
    "lm_head": "default: the draft's logits decide acceptance; engines keep lm_head unquantized",
}
NON_LINEAR_REASONS = {
    Role.NORM: "norm (never quantized)",
    Role.EMBEDDING: "embedding (never quantized)",
    Role.VOCAB_MAP: "vocabulary map (copied as is)",
    Role.BIAS: "bias (copied as is)",
    Role.OTHER: "not part of the known layout (copied as is)",
}


@dataclass(frozen=True)
class OutputTensor:
    spec: TensorSpec
    source: str  # checkpoint tensor copied byte for byte, or the weight of the linear it was quantized from
    quantized_from: str | None = None  # canonical module when quantized


@dataclass
class ConversionPlan:
    head: HeadDescription
    scheme: Scheme
    format: Format
    engines: list[Engine]
    target_layers: int | None
    quantized: list[HeadLinear]
    kept: dict[str, str]  # checkpoint tensor name -> why it keeps its source dtype
    outputs: list[OutputTensor]
    exclude_patterns: list[str]
    verdicts: list[ModuleVerdict] = field(default_factory=list)
    input_amax: dict[str, float] = field(default_factory=dict)  # calibrated activation amax per linear
    notes: list[str] = field(default_factory=list)  # what the user should know: downgrades, layers kept

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

    def quantization_config(self) -> dict[str, object]:
        return self.format.quantization_config(self.scheme, self.exclude_patterns)


def match_rule(rule: str, names: tuple[str, ...]) -> bool:
    """A user rule: ``re:<regex>`` (full match) or a glob, against a module or tensor name."""
    if rule.startswith("re:"):
        try:
            regex = re.compile(rule[3:])
        except re.error as exc:
            raise InputError(f"--exclude {rule!r} is not a valid regular expression ({exc})") from exc
        return any(regex.fullmatch(n) for n in names)
    return any(fnmatch.fnmatchcase(n, rule) for n in names)


def resolve_exclusions(head: HeadDescription, rules: list[str]) -> dict[str, str]:
    """Canonical linear module -> why it is excluded. Each user rule must match at least one linear."""
    excluded = {m: reason for m, reason in DEFAULT_EXCLUSIONS.items() if any(lin.module == m for lin in head.linears)}
    for rule in rules:
        hits = [lin for lin in head.linears if match_rule(rule, (lin.checkpoint_module, lin.weight))]
        if not hits:
            others = [t.name for t in head.tensors if match_rule(rule, (t.name, t.name.rsplit(".", 1)[0]))]
            why = f"only non-linear tensors ({', '.join(others[:3])})" if others else "nothing"
            raise InputError(
                f"--exclude {rule!r} matches {why}",
                hint="rules match checkpoint linear names as `eaglequant inspect` shows them, "
                "e.g. 'midlayer.self_attn.*' or 're:.*down_proj'",
            )
        for lin in hits:
            excluded.setdefault(lin.module, f"--exclude {rule}")
    return excluded


def build_plan(
    head: HeadDescription,
    scheme: Scheme | str,
    format_name: str,
    *,
    exclude: list[str] | tuple[str, ...] = (),
    engines: list[str] | tuple[str, ...] = ("vllm",),
    target_layers: int | None = None,
    input_amax: dict[str, float] | None = None,
) -> ConversionPlan:
    notes: list[str] = []
    scheme = _effective_scheme(load_scheme(scheme) if isinstance(scheme, str) else scheme, input_amax, notes)
    fmt = get_format(format_name)
    if not fmt.supports(scheme):
        able = [f.name for f in FORMATS.values() if f.supports(scheme)]
        raise InputError(
            f"format {fmt.name!r} cannot store scheme {scheme.name!r} ({scheme.label} {scheme.weight.kind})",
            hint=f"formats that can: {', '.join(able)}" if able else "no format stores this scheme",
        )
    engine_names = list(dict.fromkeys(engines))
    engine_objs = [get_engine(name) for name in engine_names]
    notes += check_engines(scheme.kinds, scheme.name, fmt.name, engine_names, head.attention, _builtin_names_by_kinds())
    if target_layers is not None and target_layers < 0:
        raise InputError(f"--target-layers must be >= 0, got {target_layers}")
    excluded = resolve_exclusions(head, list(exclude))
    check_fused_groups(head, set(excluded))
    _exclude_unstorable(head, fmt, scheme, excluded, notes)
    quantized = [lin for lin in head.linears if lin.module not in excluded]
    if not quantized:
        raise InputError("every linear is excluded; nothing would be quantized", hint="relax --exclude")
    tensors_by_name = {t.name: t for t in head.tensors}
    for lin in quantized:
        check_quantizable_dtype(tensors_by_name[lin.weight].info)
    kept = {t.name: _kept_reason(t, excluded) for t in head.tensors if not _is_quantized_weight(t, quantized)}
    outputs = _outputs(head, fmt, scheme, quantized)
    patterns = synthesize_patterns(head, set(excluded), engine_objs, fmt.name, target_layers)
    verdicts = prove(head, patterns, {lin.module for lin in quantized}, engine_objs, fmt.name, target_layers)
    amax = {m: v for m, v in (input_amax or {}).items() if m in {lin.module for lin in quantized}}
    return ConversionPlan(
        head, scheme, fmt, engine_objs, target_layers, quantized, kept, outputs, patterns, verdicts, amax, notes
    )


def refuse_unused_calibration(scheme: Scheme) -> None:
    """Calibration data only means something to a scheme with a calibrated activation scale."""
    if not scheme.needs_calibration:
        raise InputError(
            f"--calib was given but scheme {scheme.name!r} has no calibrated activation scale",
            hint="drop --calib, or use a scheme whose activations have global_scale = true (nvfp4)",
        )


def _effective_scheme(scheme: Scheme, input_amax: dict[str, float] | None, notes: list[str]) -> Scheme:
    if input_amax:
        refuse_unused_calibration(scheme)
    if scheme.needs_calibration and not input_amax:
        written = scheme.without_calibration()
        notes.append(
            f"{scheme.name}: no --calib data, so activations are not quantized: written as {written.label} "
            f"(weight-only); pass --calib to get {scheme.label}"
        )
        return written
    return scheme


@functools.cache
def _builtin_names_by_kinds() -> dict[tuple[str, str | None], str]:
    names: dict[tuple[str, str | None], str] = {}
    for name in builtin_scheme_names():
        scheme = load_scheme(name)
        names.setdefault(scheme.kinds, name)
        if scheme.needs_calibration and scheme.if_uncalibrated == "weight-only":
            names.setdefault(scheme.without_calibration().kinds, name)
    return names


def _exclude_unstorable(
    head: HeadDescription, fmt: Format, scheme: Scheme, excluded: dict[str, str], notes: list[str]
) -> None:
    """Keep in the source dtype every linear the format cannot store (and the rest of its fused group)."""
    for linear in head.linears:
        if linear.module in excluded:
            continue
        problem = fmt.shape_problem(linear, scheme)
        if problem is None:
            continue
        group = head.group_of(linear.module)
        members = group.members if group else (linear.module,)
        for member in members:
            why = problem if member == linear.module else f"fused with {linear.module}: {problem}"
            excluded.setdefault(member, f"kept: {why}")
        notes.append(f"kept {', '.join(members)} unquantized: {problem}")


def _is_quantized_weight(tensor: HeadTensor, quantized: list[HeadLinear]) -> bool:
    return any(tensor.name == lin.weight for lin in quantized)


def _kept_reason(tensor: HeadTensor, excluded: dict[str, str]) -> str:
    if tensor.role is Role.LINEAR:
        return excluded[tensor.module]
    return NON_LINEAR_REASONS[tensor.role]


def _outputs(head: HeadDescription, fmt: Format, scheme: Scheme, quantized: list[HeadLinear]) -> list[OutputTensor]:
    outputs: list[OutputTensor] = []
    by_weight = {lin.weight: lin for lin in quantized}
    for tensor in head.tensors:
        linear = by_weight.get(tensor.name)
        if linear is None:
            info = tensor.info
            outputs.append(OutputTensor(TensorSpec(tensor.name, info.dtype, info.shape), tensor.name))
            continue
        for spec in fmt.tensor_specs(linear, scheme):
            outputs.append(OutputTensor(spec, tensor.name, linear.module))
    names = [o.spec.name for o in outputs]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:
        raise InputError(
            f"output tensor {clash!r} would be written twice; the source already holds a tensor by that name"
        )
    return sorted(outputs, key=lambda o: o.spec.name)
