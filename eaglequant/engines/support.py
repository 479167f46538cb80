"""What the targeted engine releases support, and what a conversion asks of them, checked in one call.

The support matrix: which engine loads which (scheme, format) for an EAGLE-3 draft's linear layers, gathered from each
release's own cells (rows are scheme kinds, so a user's own scheme file is judged like the built-in with the same
kinds; each cell names the engine source that decides it, for the release the engine's model describes). Cells of
engines with a probe (:mod:`eaglequant.engine_load`: vLLM, SGLang) are *run*: the engine-load tests load every fixture
in them with the engine's own code, and a cell that says no must fail there. The others (TensorRT-LLM) are *read*.

:func:`engine_support` is the plan's one question to it: the schemes' kinds, the modules a conversion asks to run
quantized and the linears' different kinds (each answered by the engine's decision on that module,
:meth:`Engine.decide`; no cell is read to refuse), then what cannot be written as the assignment asks, each refused
in one line naming what works; an engine's refusal is raised as :class:`~eaglequant.engines.refusal.EngineRefusal`,
saying what it refuses, so ``search`` catches it. The tables ``eaglequant schemes`` and ``docs/engines.md`` show are
drawn from the same answers (:mod:`.support_tables`); the cells give them, and the refusals, their words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, Words, placeholder, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.engines import ENGINES, Engine, RuntimeModule
from eaglequant.engines.base import TARGET_LAYERS_HINT
from eaglequant.engines.cells import (
    FP8_BLOCK_W8A8,
    FP8_W8A8,
    INT4_W4A16,
    INT4_W4A16_ASYM,
    INT8_W8A8,
    MXFP4_W4A4,
    MXFP4_W4A16,
    NVFP4_W4A4,
    NVFP4_W4A16,
    Answer,
    KindPair,
    Support,
)
from eaglequant.engines.decision import ModuleDecision, Outcome
from eaglequant.engines.refusal import EngineRefusal, Refusal, Refused, first_refusal
from eaglequant.engines.target import TargetModel
from eaglequant.formats import FORMATS, Format
from eaglequant.formats.base import HeadStorage
from eaglequant.layouts.head import Attention, HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import builtin_names_by_kinds

ENGINE_NAMES = tuple(ENGINES)
FORMAT_NAMES = tuple(FORMATS)
SCHEME_KINDS: dict[KindPair, str] = {  # the matrix's rows, in order, as the docs title them
    FP8_W8A8: "FP8 per-channel W8A8 (dynamic per-token activations)",
    FP8_BLOCK_W8A8: "FP8 block W8A8 (128x128 weight blocks, dynamic per-token-group activations)",
    NVFP4_W4A16: "NVFP4 W4A16",
    NVFP4_W4A4: "NVFP4 W4A4 (calibrated input_scale)",
    MXFP4_W4A4: "MXFP4 W4A4 (dynamic activations)",
    MXFP4_W4A16: "MXFP4 W4A16",
    INT8_W8A8: "INT8 per-channel W8A8 (dynamic per-token activations)",
    INT4_W4A16: "INT4 W4A16 (symmetric, groups of 128)",
    INT4_W4A16_ASYM: "INT4 W4A16 asymmetric (zero points, groups of 128)",
}


# (scheme kinds, format) -> engine -> Support, gathered from each engine release's own cells. A missing row means
# the format cannot store the scheme. vLLM 0.32.0 and SGLang 0.5.23 are run (tests/engine_load/test_engine_load.py);
# TensorRT-LLM 1.2.x and main are read.
def _gathered() -> dict[tuple[KindPair, str], dict[str, Support]]:
    matrix: dict[tuple[KindPair, str], dict[str, Support]] = {}
    for name, engine in ENGINES.items():
        for key, cell in engine.cells.items():
            matrix.setdefault(key, {})[name] = cell
    return matrix


MATRIX = _gathered()


def support(kinds: KindPair, format_name: str, engine: Engine, attention: Attention = Attention.MHA) -> Support | None:
    """What the release ``engine`` says of ``kinds`` stored in ``format_name``; None when the format cannot store the
    scheme at all."""
    return engine.draft_cells.get((kinds, format_name, attention))


def loaded_kinds(engine: Engine, fmt: Format, attention: Attention) -> KindPair | str:
    """The first scheme kinds ``engine`` loads from ``fmt`` for a draft of this ``attention`` (its decision on a
    decoder linear stored in them); where it loads none, why: the reason most of its cells give."""
    notes = []
    for kinds in SCHEME_KINDS:
        if _decoder_decision(engine, fmt, kinds, attention).outcome is not Outcome.REFUSED:
            return kinds
        cell = support(kinds, fmt.name, engine, attention)
        if cell is not None:
            notes.append(cell.note)
    if not notes:
        return f"{fmt.title} stores none of the schemes {engine.titled} loads"
    return f"loads no scheme in {fmt.title}: {Counter(notes).most_common(1)[0][0]}"


def draft_refusal(engine: Engine, head: HeadDescription, fmt: Format, kinds: KindPair) -> str | None:
    """Why ``engine`` cannot build ``head`` as a draft at all, whatever the scheme (None: it can): its decision
    (:meth:`Engine.decide`) on the head's first runtime module, where that refuses the whole draft."""
    decision = engine.decide(engine.runtime_modules(head, 1)[0], fmt, kinds)
    return decision.why if decision.whole_draft else None


def kinds_refusal(
    engine: Engine, fmt: Format, kinds: Sequence[KindPair], attention: Attention, mixed: bool = False
) -> str | None:
    """Why ``engine`` cannot load a ``fmt`` checkpoint whose linears are stored in ``kinds`` (None: it loads each), as
    its decision (:meth:`Engine.decide`) on a decoder linear stored in each says: refused (the format cannot store
    the kinds, the engine does not load them from it); with ``mixed`` (the linears are in different kinds) also
    where it does not read per-module kinds from ``fmt`` or would not run the linear quantized."""
    module = _asked_module("module_kinds", attention)
    for each in kinds:
        decision = engine.decide(module, fmt, each, mixed=mixed)
        if mixed and not decision.quantized:
            return decision.why if decision.why.startswith(engine.titled) else f"{engine.titled}: {decision.why}"
        if decision.outcome is Outcome.REFUSED:
            return decision.why
    return None


def checkpoint_refusal(
    engine: Engine, head: HeadDescription, fmt: Format, kinds: Sequence[KindPair], mixed: bool
) -> Refusal | None:
    """Why ``engine`` cannot load a ``fmt`` checkpoint of ``head`` whose linears are stored in ``kinds`` (the main
    scheme's first; ``mixed``: its config gives linears kinds of their own), in the order the plan refuses: the head
    whatever the scheme, the main scheme, then the linears' own kinds; None: it loads it. Each is its decision
    (:meth:`Engine.decide`): ``explain`` reads a written checkpoint's refusal here."""
    whole = draft_refusal(engine, head, fmt, kinds[0])
    if whole is not None:
        return Refusal(engine, Refused.HEAD, whole)
    main = kinds_refusal(engine, fmt, kinds[:1], head.attention)
    if main is not None:
        return Refusal(engine, Refused.SCHEME, main)
    own = kinds_refusal(engine, fmt, kinds, head.attention, mixed=True) if mixed else None
    return None if own is None else Refusal(engine, Refused.MODULE_KINDS, own)


def _decoder_decision(engine: Engine, fmt: Format, kinds: KindPair, attention: Attention) -> ModuleDecision:
    """The engine's decision on a decoder linear of a ``fmt`` checkpoint stored in ``kinds``: whether it loads the
    kinds from the format at all."""
    return engine.decide(_asked_module("module_kinds", attention), fmt, kinds)


# Modules a conversion may ask to run quantized beyond the decoder (--quantize, --scheme-for), as the module table
# asks about them.
MODULE_QUESTIONS = ("lm_head", "fc")
SEE_TABLE = "`eaglequant schemes` shows what each engine runs per module"

# The module each question asks about (a decoder linear for per-module kinds), as the engine would build it.
_ASKED_MODULES: dict[str, tuple[str, ...]] = {
    "lm_head": ("lm_head",),
    "fc": ("fc",),
    "module_kinds": ("layers.0.mlp.down_proj",),
}


def _asked_module(question: str, attention: Attention) -> RuntimeModule:
    members = _ASKED_MODULES[question]
    names = {"lm_head": "lm_head", "fc": "model.fc"}.get(members[0], "model.layers.1.mlp.down_proj")
    return RuntimeModule((names,), members, (0,), attention)


def answer(engine: Engine, fmt: Format, question: str, attention: Attention) -> Answer:
    """The engine's answer to one of :data:`QUESTIONS` for a ``fmt`` checkpoint of this ``attention``: its decision
    (:meth:`Engine.decide`) on the module asked about, in the first kinds it loads from ``fmt``; where it loads no
    scheme from ``fmt``, the reason most of its cells give."""
    loaded = loaded_kinds(engine, fmt, attention)
    if isinstance(loaded, str):
        return Answer(False, loaded)
    if question == "pruned_vocabulary":
        return engine.loads_pruned_vocabulary(attention)
    decision = engine.decide(_asked_module(question, attention), fmt, loaded, mixed=question == "module_kinds")
    return Answer(decision.quantized, decision.why)


@dataclass(frozen=True)
class ModuleRequest:
    """What a conversion asks of every targeted engine beyond its main scheme: each scheme's kinds, the modules
    (fc, lm_head) it asks to run quantized, and whether its linears mix kinds."""

    kinds: tuple[KindPair, ...]
    modules: tuple[str, ...]
    mixed: bool

    @property
    def what(self) -> str:
        """The request in words, with its verb: ``linears of different kinds load``, ``lm_head quantized loads``."""
        if self.mixed:
            return "linears of different kinds load"
        return " and ".join(self.modules) + (" quantized load" if len(self.modules) > 1 else " quantized loads")


def module_refusal(engine: Engine, fmt: Format, request: ModuleRequest, attention: Attention) -> Refusal | None:
    """Why ``engine`` cannot serve ``request`` from a ``fmt`` checkpoint (None: it can), each its decision, in the
    order of :class:`Refused`: the main scheme's kinds, the linears' own kinds (it reads none from ``fmt``, or does
    not load one of them), then a module asked quantized that it runs unquantized."""
    main = kinds_refusal(engine, fmt, request.kinds[:1], attention)
    if main is not None:
        return Refusal(engine, Refused.SCHEME, main)
    if request.mixed:
        said = answer(engine, fmt, "module_kinds", attention)
        if not said.yes:
            why = said.why if said.why.startswith(engine.titled) else f"{engine.titled}: {said.why}"
            return Refusal(engine, Refused.MODULE_KINDS, why)
    own = kinds_refusal(engine, fmt, request.kinds[1:], attention)
    if own is not None:
        return Refusal(engine, Refused.MODULE_KINDS, own)
    for module in request.modules:
        said = answer(engine, fmt, module, attention)
        if not said.yes:
            why = f"{engine.titled} runs {module} unquantized in {fmt.title}: {said.why}"
            return Refusal(engine, Refused.MODULE, why, module)
    return None


def request_refusal(engine: Engine, fmt: Format, request: ModuleRequest, attention: Attention) -> str | None:
    """Why ``engine`` cannot serve ``request`` from a ``fmt`` checkpoint, in words (None: it can)."""
    refusal = module_refusal(engine, fmt, request, attention)
    return None if refusal is None else refusal.why


def working_formats(engines: Sequence[Engine], request: ModuleRequest, attention: Attention) -> list[Format]:
    """The formats in which every one of ``engines`` serves ``request``."""
    return [f for f in FORMATS.values() if all(request_refusal(e, f, request, attention) is None for e in engines)]


def module_hint(engines: Sequence[Engine], request: ModuleRequest, attention: Attention) -> Words:
    """What does work for ``request``: a format every targeted engine serves it in, else the engines and formats
    that do, else that none does; each computed from :func:`request_refusal`, so none names a refused combination."""
    formats = working_formats(engines, request, attention)
    titles = _titles(list(engines))
    if formats:
        return words("use ", suggested("format", formats[0].name), f", which {titles} can load; {SEE_TABLE}")
    able = {
        f: [e for e in ENGINES.values() if request_refusal(e, f, request, attention) is None] for f in FORMATS.values()
    }
    found = [(f, serving) for f, serving in able.items() if serving]
    if not found:
        return words(f"{request.what} in no engine release with this scheme: drop that rule; {SEE_TABLE}")
    (fmt, serving), only = found[0], " only" if len(found) == 1 else ""
    targets = [suggested("engines", e.key) for e in serving]
    return words(
        f"{request.what}{only} in {_titles(serving)} with ",
        suggested("format", fmt.name),
        " (target ",
        *_joined(targets),
        f"); {SEE_TABLE}",
    )


def check_module_request(
    engines: Sequence[Engine], fmt: Format, request: ModuleRequest, attention: Attention, described: str
) -> None:
    """Refuse, naming what works, a ``request`` some targeted engine cannot serve from a ``fmt`` checkpoint (the
    first refusal by what it refuses, then by engine); ``described``: the conversion's schemes in words."""
    refusal = first_refusal([module_refusal(engine, fmt, request, attention) for engine in engines])
    if refusal is not None:
        raise EngineRefusal(refusal, f"{refusal.why} ({described})", hint=module_hint(engines, request, attention))


def _titles(engines: list[Engine]) -> str:
    names = [e.titled for e in engines]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _joined(pieces: list[Any]) -> list[Any]:
    joined: list[Any] = []
    for i, piece in enumerate(pieces):
        joined += [", " if i else "", piece]
    return joined


@dataclass(frozen=True)
class EngineSupport:
    """What the targeted engines say of a conversion's schemes in its format, decided once for the plan."""

    notes: list[Finding]  # the conditions under which they load the main scheme (shown as warnings)
    loading_formats: tuple[Format, ...]  # every format in which each targeted engine loads the main scheme


def engine_support(
    engines: list[Engine],
    fmt: Format,
    assignment: SchemeAssignment,
    attention: Attention,
    storage: HeadStorage,
    target: TargetModel,
    asked: tuple[str, ...] = (),
) -> EngineSupport:
    """Refuse, in one line naming what works: the schemes' kinds or a module (``asked``: of
    :data:`MODULE_QUESTIONS`, to run quantized) a targeted engine cannot serve from ``fmt``
    (:func:`check_module_request`, whose hint names what serves the whole request), a main scheme it cannot load
    (:func:`check_engines`), a linear a rule gives a scheme ``fmt`` cannot store it in (``storage``: how ``fmt``
    stores each linear), then what else cannot be written as ``assignment`` asks (:func:`check_assignment`;
    ``target``: whose layer count names per-module entries). Else what the engines say of it."""
    if asked or assignment.mixed:
        wanted = ModuleRequest(tuple(scheme.kinds for scheme in assignment.schemes), asked, assignment.mixed)
        check_module_request(engines, fmt, wanted, attention, assignment.describe())
    main = assignment.main
    notes = check_engines(main.kinds, main.name, fmt, engines, attention)
    check_rules_storable(assignment, storage)
    check_assignment(fmt, assignment, target)
    loading = tuple(f for f in FORMATS.values() if _loads_everywhere(main.kinds, f, engines, attention))
    return EngineSupport(notes, loading)


class ModuleSchemesNeedLayerCount(InputError):
    """Per-module entries cannot be written without the target's layer count (``search`` counts what it skips)."""


class UnstorableRule(InputError):
    """A rule gives ``module`` a scheme the format cannot store it in (``search`` counts what it skips)."""

    def __init__(self, module: str, message: str | Words) -> None:
        super().__init__(message)
        self.module = module


def check_rules_storable(assignment: SchemeAssignment, storage: HeadStorage) -> None:
    """Refuse a linear a rule gives a scheme that the format cannot store it in (``storage``)."""
    for module, rule in assignment.by_module.items():
        problem = storage.problems.get(module)
        if problem is not None:
            raise UnstorableRule(module, words(suggested("scheme_for", rule.text), f": {problem}"))


def check_assignment(fmt: Format, assignment: SchemeAssignment, target: TargetModel) -> None:
    """Refuse what cannot be written as ``assignment`` asks for linears of different kinds: a format that does not
    hold per-module kinds, or an unknown target layer count (per-module entries name each module as the engine
    does, layer index included)."""
    if not assignment.mixed:
        return
    if not fmt.stores_mixed:
        able = ", ".join(f.name for f in FORMATS.values() if f.stores_mixed)
        raise InputError(
            f"{fmt.title} cannot store linears of different kinds in one checkpoint ({assignment.describe()})",
            hint=f"formats that can: {able}" if able else "give every linear one scheme",
        )
    if target.count is None:
        raise ModuleSchemesNeedLayerCount(
            f"{fmt.title}'s per-module entries name each module as the engine does, after the target's layers, so "
            "writing them needs the target's layer count",
            hint=TARGET_LAYERS_HINT,
        )


def _loads_everywhere(kinds: KindPair, fmt: Format, engines: list[Engine], attention: Attention) -> bool:
    return all(_decoder_decision(e, fmt, kinds, attention).outcome is not Outcome.REFUSED for e in engines)


def _weight_bits(kinds: KindPair) -> int:
    return kinds.weight_kind.bits


def check_engines(
    kinds: KindPair,
    scheme_name: str,
    fmt: Format,
    engines: list[Engine],
    attention: Attention,
    scheme_names: dict[KindPair, str] | None = None,
) -> list[Finding]:
    """Refuse, in one line naming a combination that works, a main scheme a targeted engine cannot load: its
    decision (:meth:`Engine.decide`) on a decoder linear stored in ``kinds``.

    Returns the conditions under which the targeted engines load it (to show as warnings).
    ``scheme_names``: scheme kinds -> a built-in scheme name, to suggest another scheme (default: the built-ins).
    """
    warnings = []
    for engine in engines:
        decision = _decoder_decision(engine, fmt, kinds, attention)
        cell = support(kinds, fmt.name, engine, attention)  # the matrix's words on it
        if decision.outcome is not Outcome.REFUSED:
            if cell is not None and cell.conditional:
                warnings.append(Finding("engine-condition", engine.key, f"{engine.title}: {cell.note}"))
            continue
        raise EngineRefusal(
            Refusal(engine, Refused.SCHEME, decision.why),
            f"{engine.title} cannot load {scheme_name} ({SCHEME_KINDS.get(kinds, kinds)}) "
            f"in {fmt.name} format: {decision.why if cell is None else cell.note}",
            hint=_scheme_hint(kinds, scheme_name, engines, attention, scheme_names or builtin_names_by_kinds()),
        )
    return warnings


def _scheme_hint(
    kinds: KindPair, scheme_name: str, engines: list[Engine], attention: Attention, scheme_names: dict[KindPair, str]
) -> str | Words:
    """A scheme and format every one of ``engines`` loads: ``kinds`` in another format, else another built-in
    scheme of the same weight width first, else any."""
    others = sorted((k for k in scheme_names if k != kinds), key=lambda k: _weight_bits(k) != _weight_bits(kinds))
    candidates = [kinds, *others]  # another scheme of the same weight width first: 4-bit for 4-bit
    working = ((k, f) for k in candidates for f in FORMATS.values() if _loads_everywhere(k, f, engines, attention))
    first = next(working, None)
    titles = _engines_words(engines)
    if first is None:
        return f"no built-in scheme loads in {titles}; target fewer engines"
    found, able = first
    if found == kinds:
        return words("use ", suggested("format", able.name), f", which {titles} can load")
    name = scheme_names[found]
    # a scheme named for two kinds (nvfp4: W4A4, W4A16 without calib) gives the first only with calib
    twice = list(scheme_names.values()).count(name) > 1
    calib = (" with captured inputs (convert ", placeholder("calib", "FILE"), ")") if twice and found[1] else ()
    scheme = () if name == scheme_name else (suggested("scheme", name), " ")
    return words("use ", *scheme, suggested("format", able.name), *calib, f", which {titles} can load")


def _engines_words(engines: list[Engine]) -> str:
    """``vLLM and SGLang``; ``vLLM, SGLang and TensorRT-LLM main``; every engine: ``every engine``."""
    if {e.key for e in engines} == set(ENGINE_NAMES) and len(engines) > 2:
        return "every engine"
    titles = [e.title for e in engines]
    return titles[0] if len(titles) == 1 else f"{', '.join(titles[:-1])} and {titles[-1]}"
