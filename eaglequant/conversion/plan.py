"""Deciding what a conversion does before any weight is read.

A :class:`ConversionPlan` lists every output tensor (quantized or copied), why each linear is kept,
the exclusion rules written into config.json and the engines' verdict on them. ``inspect`` shows a
plan; ``convert`` executes one. Building a plan reads headers only.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.errors import InputError, Param, given, words
from eaglequant.conversion.options import DEFAULT_ENGINES, compiled_rule
from eaglequant.engines import Engine, get_engine
from eaglequant.engines.exclusions import (
    ModuleVerdict,
    check_fused_groups,
    checkpoint_names,
    engine_requirements,
    fused_reason,
    prove,
    runtime_spellings,
    synthesize_patterns,
)
from eaglequant.engines.support import check_engines
from eaglequant.engines.target import TargetLayers, resolve_target_layers
from eaglequant.engines.view import EngineView
from eaglequant.formats import FORMATS, Format, get_format
from eaglequant.kinds import kinds_title
from eaglequant.layouts.detect import check_quantizable_dtype
from eaglequant.layouts.head import HeadDescription, HeadLinear, HeadTensor, Role
from eaglequant.schemes import Scheme
from eaglequant.schemes.model import builtin_names_by_kinds

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
    target: TargetLayers
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


def match_rule(rule: str, names: tuple[str, ...], option: str) -> bool:
    """A user rule (given as ``option``): ``re:<regex>`` (full match) or a glob, against a module or tensor name."""
    regex = compiled_rule(rule, option)
    if regex is not None:
        return any(regex.fullmatch(n) for n in names)
    return any(fnmatch.fnmatchcase(n, rule) for n in names)


def _linears_matching(head: HeadDescription, rule: str, option: str) -> list[HeadLinear]:
    hits = [lin for lin in head.linears if match_rule(rule, (lin.checkpoint_module, lin.weight), option)]
    if not hits:
        others = [t.name for t in head.tensors if match_rule(rule, (t.name, t.name.rsplit(".", 1)[0]), option)]
        why = f"only non-linear tensors ({', '.join(others[:3])})" if others else "nothing"
        raise InputError(
            words(given(option, rule), f" matches {why}"),
            hint="rules match checkpoint linear names as `eaglequant inspect` shows them, "
            "e.g. 'midlayer.self_attn.*' or 're:.*down_proj'",
        )
    return hits


def resolve_exclusions(
    head: HeadDescription,
    exclude: list[str] | tuple[str, ...],
    quantize: list[str] | tuple[str, ...] = (),
    required: dict[str, str] | None = None,
) -> dict[str, str]:
    """Canonical linear module -> why it keeps its source dtype.

    ``required``: linears a targeted engine runs unquantized (module -> engine's reason); ``quantize``
    rules lift the defaults (fc, lm_head) but never a requirement; ``exclude`` rules add to them. Each
    rule must match at least one linear, and no linear may be both quantized and excluded by the user.
    """
    opted_in = {lin.module: rule for rule in quantize for lin in _linears_matching(head, rule, "quantize")}
    excluded: dict[str, str] = {}
    for module, reason in (required or {}).items():
        if module in opted_in:
            raise InputError(
                words(
                    given("quantize", opted_in[module]),
                    f" asks to quantize {head.linear(module).checkpoint_module}, but {reason}",
                ),
                hint=words(
                    "drop that ", Param("quantize"), " rule, or the ", Param("engines"), " that cannot run it quantized"
                ),
            )
        excluded[module] = reason
    for module, reason in DEFAULT_EXCLUSIONS.items():
        if module not in opted_in and any(lin.module == module for lin in head.linears):
            excluded.setdefault(module, reason)
    for rule in exclude:
        for lin in _linears_matching(head, rule, "exclude"):
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
            excluded.setdefault(lin.module, f"--exclude {rule}")
    return excluded


def build_plan(
    head: HeadDescription,
    scheme: Scheme,
    format_name: str,
    *,
    exclude: list[str] | tuple[str, ...] = (),
    quantize: list[str] | tuple[str, ...] = (),
    engines: list[str] | tuple[str, ...] = DEFAULT_ENGINES,
    target_layers: int | None = None,
    target_config: str | Path | None = None,
    input_amax: dict[str, float] | None = None,
) -> ConversionPlan:
    """The plan for converting ``head`` with ``scheme`` into ``format_name`` for ``engines``; ``input_amax``: the
    calibrated activation amax per linear (see :mod:`eaglequant.draft.calibrate`)."""
    notes: list[str] = []
    scheme = _effective_scheme(scheme, input_amax, notes)
    fmt = get_format(format_name)
    if not fmt.supports(scheme):
        able = [f.name for f in FORMATS.values() if f.supports(scheme)]
        raise InputError(
            f"format {fmt.name!r} cannot store scheme {scheme.name!r} ({kinds_title(scheme.kinds)})",
            hint=f"formats that can: {', '.join(able)}" if able else "no format stores this scheme",
        )
    engine_names = list(dict.fromkeys(engines))
    engine_objs = [get_engine(name) for name in engine_names]
    for engine in engine_objs:
        refusal = engine.head_refusal(head)
        if refusal is not None:
            raise InputError(f"{engine.title} cannot load this head: {refusal}", hint="do not target this engine")
    notes += check_engines(scheme.kinds, scheme.name, fmt.name, engine_names, head.attention, builtin_names_by_kinds())
    target = resolve_target_layers(target_layers, target_config, head.config)
    views = [EngineView.of(engine, head, fmt.name, scheme.kinds, target.count) for engine in engine_objs]
    excluded = kept_linears(head, fmt, scheme, views, exclude, quantize, notes)
    quantized = [lin for lin in head.linears if lin.module not in excluded]
    tensors_by_name = {t.name: t for t in head.tensors}
    for lin in quantized:
        check_quantizable_dtype(tensors_by_name[lin.weight].info)
    kept = {t.name: _kept_reason(t, excluded) for t in head.tensors if not _is_quantized_weight(t, quantized)}
    outputs = _outputs(head, fmt, scheme, quantized)
    patterns = synthesize_patterns(views, excluded)
    quantized_modules = {lin.module for lin in quantized}
    verdicts = prove(views, patterns, quantized_modules)
    amax = {m: v for m, v in (input_amax or {}).items() if m in quantized_modules}
    return ConversionPlan(
        head, scheme, fmt, engine_objs, target, quantized, kept, outputs, patterns, verdicts, amax, notes
    )


def kept_linears(
    head: HeadDescription,
    fmt: Format,
    scheme: Scheme,
    views: list[EngineView],
    exclude: list[str] | tuple[str, ...],
    quantize: list[str] | tuple[str, ...],
    notes: list[str],
) -> dict[str, str]:
    """The one decision of which linears stay in the source dtype, and why (canonical module -> reason): what a
    targeted engine cannot run quantized, the defaults and the user's rules, then what the format cannot store
    (with the rest of its fused group). Refuses a plan that would quantize nothing."""
    excluded = resolve_exclusions(head, exclude, quantize, engine_requirements(views))
    check_fused_groups(head, set(excluded))
    chosen = set(excluded)
    _exclude_unstorable(head, fmt, scheme, excluded, notes, views)
    if all(lin.module in excluded for lin in head.linears):
        if any(lin.module not in chosen for lin in head.linears):
            raise InputError(
                f"{fmt.title} {scheme.name} can store none of this head's linears; nothing would be quantized "
                f"({notes[-1].removeprefix('kept ')})",
                hint="choose another scheme (eaglequant schemes lists them)",
            )
        raise InputError("every linear is excluded; nothing would be quantized", hint=words("relax ", Param("exclude")))
    return excluded


def _effective_scheme(scheme: Scheme, input_amax: dict[str, float] | None, notes: list[str]) -> Scheme:
    if input_amax and not scheme.needs_calibration:  # ConversionOptions refuses calib for it before calibrating
        raise InputError(f"input_amax was given but scheme {scheme.name!r} has no calibrated activation scale")
    if scheme.needs_calibration and not input_amax:
        written = scheme.without_calibration()
        notes.append(
            f"{scheme.name}: no --calib data, so activations are not quantized: written as {written.label} "
            f"(weight-only); pass --calib to get {scheme.label}"
        )
        return written
    return scheme


def _exclude_unstorable(
    head: HeadDescription,
    fmt: Format,
    scheme: Scheme,
    excluded: dict[str, str],
    notes: list[str],
    views: list[EngineView],
) -> None:
    """Keep in the source dtype every linear the format cannot store (and the rest of its fused group), said in the
    checkpoint's names with the engines' name for a fused module beside them."""
    for linear in head.linears:
        if linear.module in excluded:
            continue
        group = head.group_of(linear.module)
        problem = fmt.shape_problem(linear, scheme, group is not None and group.members[-1] != linear.module)
        if problem is None:
            continue
        members = group.members if group else (linear.module,)
        for member in members:
            excluded.setdefault(
                member, problem if member == linear.module else fused_reason(head, linear.module, problem)
            )
        fused = runtime_spellings(views, members)
        run_as = f" (one module at run time: {fused})" if fused else ""
        why = f"{linear.checkpoint_module}'s {problem}" if len(members) > 1 else problem
        notes.append(f"kept {checkpoint_names(head, members)} unquantized{run_as}: {why}")


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
        held = next((t.info.file for t in head.tensors if t.name == clash), None)
        raise InputError(
            f"{held}: holds tensor {clash!r}, a name the quantized output needs for its own tensor"
            if held is not None
            else f"output tensor {clash!r} would be written twice",
            hint="the source looks partly quantized already; start from the BF16 head the trainer released",
        )
    return sorted(outputs, key=lambda o: o.spec.name)
