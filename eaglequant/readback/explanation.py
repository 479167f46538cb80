"""How each serving engine will read a written checkpoint, module by module.

For every engine: each runtime module it builds for the draft, the config rule that excludes it (if
any), the scheme it then applies, and the tensors it will expect from the checkpoint, checked against
the checkpoint's headers. Works on any quantized head in a format eaglequant writes, including ones
written by the vendor tools. Reads config files and headers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eaglequant.checkpoint.dtypes import FLOAT_SOURCE_DTYPES
from eaglequant.checkpoint.reader import Checkpoint, load_json_object
from eaglequant.checkpoint.safetensors_file import TensorInfo
from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, JsonRecord, named
from eaglequant.engines import ENGINES, Engine, RuntimeModule
from eaglequant.engines.decision import Outcome
from eaglequant.engines.exclusions import symbolic_name
from eaglequant.engines.refusal import Refused
from eaglequant.engines.support import SCHEME_KINDS, checkpoint_refusal, support
from eaglequant.engines.target import TargetModel
from eaglequant.engines.view import layer_counts
from eaglequant.formats import FORMATS, Format, WrittenConfig, format_for_quant_method, format_for_side_files
from eaglequant.kinds import KindPair, kinds_title
from eaglequant.layouts.head import HeadDescription, HeadLinear
from eaglequant.readback.cost import RoundCost, round_cost
from eaglequant.readback.module_kinds import written_schemes
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import Scheme


@dataclass(frozen=True)
class ExpectedTensor(JsonRecord):
    name: str
    dtype: str
    shape: tuple[int, ...]
    found: str  # "ok", or what the checkpoint holds instead


@dataclass(frozen=True)
class ModuleReading(JsonRecord):
    json_renamed = named(runtime_name="runtime_module")

    runtime_name: str
    members: tuple[str, ...]  # checkpoint module names
    rule: str | None  # the config rule that excludes it
    scheme: str | None  # what the engine applies, e.g. "W8A8 fp8-channel"; None: runs unquantized
    unquantized_because: str | None
    engine_reason: str | None  # why the engine runs it unquantized whatever the rules say
    expects: tuple[ExpectedTensor, ...]
    problems: tuple[Finding, ...]


@dataclass(frozen=True)
class EngineReading(JsonRecord):
    json_computed = ("release",)
    json_first = ("engine", "title", "loads", "judged", "release", "note", "notes", "problems", "modules")

    engine: str
    title: str
    loads: bool
    note: str  # the support matrix's word on this scheme and format
    modules: tuple[ModuleReading, ...]
    problems: tuple[Finding, ...]  # engine-wide: cannot load it, or a rule that breaks its loader
    notes: tuple[Finding, ...] = ()  # deployment settings that change what the engine runs
    # False for an engine listed but not required to load DST (every engine shown, for --engine all or a checkpoint
    # another tool wrote, and this one cannot load its scheme and format): its not loading is no problem.
    judged: bool = True
    round_cost: RoundCost | None = None  # the weight bytes a speculative round reads (None: it does not load)

    @property
    def all_problems(self) -> list[Finding]:
        return [*self.problems, *(p for m in self.modules for p in m.problems)]

    @property
    def release(self) -> str:
        """The engine release this reading describes."""
        return ENGINES[self.engine].release

    @property
    def titled(self) -> str:
        """The engine with its release: ``vLLM 0.32.0``."""
        return ENGINES[self.engine].titled


@dataclass
class Explanation(JsonRecord):
    """How each engine reads a checkpoint; written with every problem found, the config files' and each engine's
    (``problems``)."""

    json_omitted = ("problems",)
    json_computed = ("ok", "all_problems")
    json_renamed = named(patterns="exclude", target="target_layers", all_problems="problems")
    json_first = ("destination", "format", "scheme", "kinds", "patterns", "target", "ok", "all_problems")
    json_read = named(problems=lambda obj, _field: _config_problems(obj))

    destination: Path
    format: str
    scheme: str  # e.g. "NVFP4 W4A16"
    kinds: KindPair
    patterns: list[str]
    target: TargetModel
    engines: list[EngineReading]
    problems: list[Finding] = field(default_factory=list)  # in the config files themselves

    @property
    def all_problems(self) -> list[Finding]:
        return [*self.problems, *(p.prefixed(f"{e.title}: ") for e in self.engines for p in e.all_problems)]

    @property
    def ok(self) -> bool:
        return not self.all_problems

    @property
    def quantized_members(self) -> set[str]:
        """Checkpoint modules the explained engines run quantized (what the plan quantized)."""
        return {
            member
            for e in self.engines
            for module in e.modules
            if module.scheme is not None
            for member in module.members
        }


def _config_problems(written: JsonObject) -> list[Finding]:
    """The config files' own problems in a written explanation: its ``problems`` less the engines', which follow
    them (:attr:`Explanation.all_problems`)."""
    engines = [EngineReading.from_json(engine) for engine in written.children("engines")]
    every = written.findings("problems")
    return list(every[: len(every) - sum(len(engine.all_problems) for engine in engines)])


def read_written_config(checkpoint: Checkpoint) -> tuple[Format, WrittenConfig]:
    """The format and scheme a converted checkpoint declares, and its exclusion rules."""
    config_path = checkpoint.root / "config.json"
    config = checkpoint.config.get("quantization_config")
    side_file_format = format_for_side_files(checkpoint.root)
    if config is None and side_file_format is not None:
        # e.g. older ModelOpt exports: engines read hf_quant_config.json
        config = {"quant_method": side_file_format.quant_method}
    if not isinstance(config, dict):
        raise InputError(
            f"{config_path}: no quantization_config: this is not a quantized checkpoint",
            hint="give the directory `eaglequant convert` wrote (DST); `eaglequant inspect` describes a source",
        )
    fmt = format_for_quant_method(config.get("quant_method"))
    if fmt is None:
        raise InputError(
            f"{config_path}: quant_method {config.get('quant_method')!r} is not a format eaglequant reads",
            hint=f"eaglequant reads {', '.join(fmt.quant_method for fmt in FORMATS.values())}",
        )
    extra = {
        name: load_json_object(checkpoint.root / name, name)
        for name in fmt.extra_file_names
        if (checkpoint.root / name).is_file()
    }
    return fmt, fmt.read_config(config, extra)


def explain_checkpoint(
    checkpoint: Checkpoint,
    head: HeadDescription,
    engines: list[str] | None,
    target: TargetModel,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
) -> Explanation:
    check_draft_tokens(draft_tokens)
    fmt, written = read_written_config(checkpoint)
    schemes = written_schemes(written, head)
    chosen = [ENGINES[name] for name in engines] if engines else list(ENGINES.values())
    requested = bool(engines)
    readings = [
        _read_engine(engine, head, checkpoint.tensors, fmt, schemes, written, target, requested, draft_tokens)
        for engine in chosen
    ]
    label = SCHEME_KINDS.get(written.kinds, kinds_title(written.kinds))
    label += "".join(f", {module} {kinds_title(s.kinds)}" for module, s in sorted(schemes.module_schemes.items()))
    problems = [_finding("config-contradiction", problem) for problem in written.problems]
    return Explanation(checkpoint.root, fmt.name, label, written.kinds, written.patterns, target, readings, problems)


def _finding(code: str, problem: str | Finding) -> Finding:
    """``problem`` as a finding with ``code``, unless its producer already made it one."""
    return problem if isinstance(problem, Finding) else Finding(code, "", problem)


def _read_engine(
    engine: Engine,
    head: HeadDescription,
    tensors: dict[str, TensorInfo],
    fmt: Format,
    schemes: SchemeAssignment,
    written: WrittenConfig,
    target: TargetModel,
    requested: bool,
    draft_tokens: int,
) -> EngineReading:
    scheme, patterns = schemes.main, written.patterns
    kinds = [each.kinds for each in schemes.schemes]  # the main scheme's first
    refusal = checkpoint_refusal(engine, head, fmt, kinds, mixed=written.listed is not None)  # as the plan refuses
    cell = support(scheme.kinds, fmt.name, engine, head.attention)  # the matrix's words on the scheme: the note
    if refusal is not None:
        note = cell.note if refusal.refused is Refused.SCHEME and cell is not None else refusal.why
        cannot_load = Finding("cannot-load", "", f"cannot load this checkpoint: {note}")
        problems: tuple[Finding, ...] = (cannot_load,) if requested else ()
        return EngineReading(engine.key, engine.title, False, note, (), problems, judged=requested)
    assert cell is not None  # the engine loads the scheme from the format: the matrix has its cell
    counts = layer_counts(target.count)
    modules_by_count = [engine.runtime_modules(head, count) for count in counts]
    readings = []
    for index, module in enumerate(modules_by_count[-1]):
        spellings = [(count, m.names) for count, m in zip(counts, (ms[index] for ms in modules_by_count), strict=True)]
        module_scheme = schemes.of(module.members[0])  # fused members share theirs
        listed = _listed(written, module, spellings)
        readings.append(
            _read_module(engine, head, tensors, fmt, module_scheme, patterns, module, spellings, target, listed)
        )
    problems = tuple(
        _finding("rule-breaks-loader", problem)
        for problem in engine.pattern_problems(head, fmt, patterns, scheme.kinds)
    )
    notes = tuple(engine.environment_notes(head.attention, scheme.kinds, fmt) + engine.draft_notes(head, target))
    stored = _stored_bytes(head, tensors, modules_by_count[-1], readings)
    cost = round_cost(head, engine.key, engine.release, stored, draft_tokens)
    return EngineReading(engine.key, engine.title, True, cell.note, tuple(readings), problems, notes, round_cost=cost)


def _listed(written: WrittenConfig, module: RuntimeModule, spellings: list[tuple[int, tuple[str, ...]]]) -> str | None:
    """Why a per-module config leaves ``module`` unquantized: none of its spellings, at every layer count the
    reading holds for, is a listed name (the engine looks its exact runtime name up); None when listed, or when the
    config lists none."""
    if written.listed is None:
        return None
    if all(names[0] in written.listed for _, names in spellings):
        return None
    return "not listed in quantized_layers under its runtime name (for this target layer count)"


def _stored_bytes(
    head: HeadDescription, tensors: dict[str, TensorInfo], modules: list[RuntimeModule], readings: list[ModuleReading]
) -> dict[str, int]:
    """Canonical linear -> the bytes the checkpoint stores for it, for each linear the engine runs quantized."""
    stored: dict[str, int] = {}
    for module, reading in zip(modules, readings, strict=True):
        if reading.scheme is None:
            continue
        for member in module.members:
            prefix = head.linear(member).checkpoint_module + "."
            stored[member] = sum(
                tensors[t.name].nbytes if t.name in tensors else TensorSpec(t.name, t.dtype, t.shape).nbytes
                for t in reading.expects
                if t.name.startswith(prefix)
            )
    return stored


def _read_module(
    engine: Engine,
    head: HeadDescription,
    tensors: dict[str, TensorInfo],
    fmt: Format,
    scheme: Scheme,
    patterns: list[str],
    module: RuntimeModule,
    spellings: list[tuple[int, tuple[str, ...]]],
    target: TargetModel,
    listed: str | None = None,
) -> ModuleReading:
    """``listed``: why a per-module config leaves the module unquantized (it does not list it), or None."""
    count, names = spellings[-1]
    shown = names[0] if target.count is not None else symbolic_name(names[0], count)
    rules = {(c, n): engine.matching_rule(fmt, n, patterns) for c, ns in spellings for n in ns}
    rule = rules[(count, names[0])]
    problems: list[Finding] = []
    if len({r is None for r in rules.values()}) > 1:
        excluded = sorted({n for (c, n), r in rules.items() if r is not None})
        why_partial = f"the rules exclude it only as {', '.join(excluded)} (spelling or target layer count dependent)"
        problems.append(Finding("excluded-in-some-spellings", shown, f"{shown}: {why_partial}"))
    decision = engine.decide(module, fmt, scheme.kinds)
    reason = decision.unquantized_by_engine or (listed if rule is None else None)
    applies = reason is None and rule is None
    why = None if applies else (reason or f"excluded by {rule!r}")
    if applies and decision.outcome is Outcome.REFUSED:  # the config leaves it quantized, which the engine refuses
        refused = f"{shown}: {engine.titled} cannot load it in {kinds_title(scheme.kinds)}: {decision.why}"
        problems.append(Finding("cannot-load", shown, refused))
    expects: list[ExpectedTensor] = []
    for member in module.members:
        linear = head.linear(member)
        found, member_problems = _check_member(linear, tensors, fmt, scheme, (applies, decision.tensors), shown, why)
        expects += found
        problems += member_problems
    return ModuleReading(
        shown,
        tuple(head.linear(m).checkpoint_module for m in module.members),
        rule,
        kinds_title(scheme.kinds) if applies else None,
        why,
        reason,
        tuple(expects),
        tuple(problems),
    )


def _check_member(
    linear: HeadLinear,
    tensors: dict[str, TensorInfo],
    fmt: Format,
    scheme: Scheme,
    quantized: tuple[bool, tuple[str, ...]],
    runtime_name: str,
    why_unquantized: str | None,
) -> tuple[list[ExpectedTensor], list[Finding]]:
    """The tensors the engine will look for under this linear, and what the checkpoint holds instead: a module run
    unquantized but stored quantized (``stored-quantized``) or run quantized but stored otherwise
    (``weight-not-quantized``), about the runtime module; else each tensor ``missing``, of another dtype or shape
    (``tensor-mismatch``), or stored but ``not-expected``, about the tensor. ``quantized``: whether the engine
    applies the scheme, and the parameters its decision loads then (``weight``, ``weight_scale``, ...: each
    with the dtype and shape the format stores it in; none where it refuses the module: the format's own)."""
    applies, loaded = quantized
    if applies:
        specs = fmt.tensor_specs(linear, scheme)
        specs = [s for s in specs if s.name.rsplit(".", 1)[-1] in loaded] if loaded else specs  # refused: as stored
    else:
        specs = [TensorSpec(linear.weight, linear.dtype, (linear.out_features, linear.in_features))]
    expected = [ExpectedTensor(s.name, s.dtype, s.shape, _found(s, tensors.get(s.name), applies)) for s in specs]
    prefix = linear.checkpoint_module + "."
    wanted = {s.name for s in specs}
    stray = sorted(n for n in tensors if n.startswith(prefix) and n not in wanted and n != prefix + "bias")
    problems = []
    wrong = [t for t in expected if t.found != "ok"]
    weight = next((t for t in wrong if t.name == prefix + "weight"), None)
    if not applies and (wrong or stray):
        stored = ", ".join(n.removeprefix(prefix) for n in stray) or (weight or wrong[0]).found
        text = (
            f"{runtime_name} runs unquantized ({why_unquantized}), but {linear.checkpoint_module} is "
            f"stored quantized ({stored}); it would load wrongly or fail"
        )
        problems.append(Finding("stored-quantized", runtime_name, text))
    elif applies and weight is not None:
        text = (
            f"{runtime_name} is quantized (no rule excludes it), but {weight.name} is {weight.found}; "
            "loading fails or computes garbage"
        )
        problems.append(Finding("weight-not-quantized", runtime_name, text))
    else:
        problems += [_tensor_problem(t) for t in wrong]
        problems += [
            Finding("not-expected", name, f"{name}: not expected for {kinds_title(scheme.kinds)} (loading fails)")
            for name in stray
        ]
    return expected, problems


def _tensor_problem(tensor: ExpectedTensor) -> Finding:
    code = "missing" if tensor.found == "missing" else "tensor-mismatch"
    return Finding(
        code, tensor.name, f"{tensor.name}: expected {tensor.dtype} {list(tensor.shape)}, found {tensor.found}"
    )


def _found(spec: TensorSpec, info: TensorInfo | None, applies: bool) -> str:
    if info is None:
        return "missing"
    dtype_ok = info.dtype == spec.dtype or (not applies and info.dtype in FLOAT_SOURCE_DTYPES)
    if dtype_ok and info.shape == spec.shape:
        return "ok"
    return f"{info.dtype} {list(info.shape)}"
