"""Deciding what a conversion does before any weight is read.

A :class:`ConversionPlan` lists every output tensor (quantized or copied), why each linear is kept,
the exclusion rules written into config.json and the engines' verdict on them. ``inspect`` shows a
plan; ``convert`` executes one. Building a plan reads headers only.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.engines import Engine, get_engine
from eaglequant.engines.exclusions import ModuleVerdict, check_fused_groups, prove, synthesize_patterns
from eaglequant.errors import InputError
from eaglequant.formats import Format, get_format
from eaglequant.layouts.detect import check_quantizable_dtype
from eaglequant.layouts.head import HeadDescription, HeadLinear, HeadTensor, Role
from eaglequant.schemes import Scheme
from eaglequant.schemes.model import load_scheme

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
) -> ConversionPlan:
    scheme = load_scheme(scheme) if isinstance(scheme, str) else scheme
    fmt = get_format(format_name)
    if not fmt.supports(scheme):
        raise InputError(f"format {fmt.name!r} cannot store scheme {scheme.name!r}")
    engine_objs = [get_engine(name) for name in dict.fromkeys(engines)]
    if target_layers is not None and target_layers < 0:
        raise InputError(f"--target-layers must be >= 0, got {target_layers}")
    excluded = resolve_exclusions(head, list(exclude))
    check_fused_groups(head, set(excluded))
    quantized = [lin for lin in head.linears if lin.module not in excluded]
    if not quantized:
        raise InputError("every linear is excluded; nothing would be quantized", hint="relax --exclude")
    tensors_by_name = {t.name: t for t in head.tensors}
    for lin in quantized:
        check_quantizable_dtype(tensors_by_name[lin.weight].info)
    kept = {t.name: _kept_reason(t, excluded) for t in head.tensors if not _is_quantized_weight(t, quantized)}
    outputs = _outputs(head, fmt, scheme, quantized)
    patterns = synthesize_patterns(head, set(excluded), engine_objs, target_layers)
    verdicts = prove(head, patterns, {lin.module for lin in quantized}, engine_objs, fmt.name, target_layers)
    return ConversionPlan(head, scheme, fmt, engine_objs, target_layers, quantized, kept, outputs, patterns, verdicts)


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
