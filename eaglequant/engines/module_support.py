"""What each engine release runs per module, per format: ``lm_head`` quantized, ``fc`` quantized, per-module kinds
(a checkpoint whose linears are stored in different kinds) and a pruned draft vocabulary (``d2t`` / ``t2d``).

Every answer is the engine model's own decision on the module asked about (:meth:`Engine.decide`; the vocabulary's
is :meth:`Engine.loads_pruned_vocabulary`), asked where the engine loads some scheme in the format at all (the
support matrix, :mod:`eaglequant.engines.support`). The same answers decide what ``convert`` refuses for
``--quantize fc|lm_head`` and ``--scheme-for`` (:func:`check_module_request`) and which combinations its hint
names, so the table (``eaglequant schemes``, ``docs/engines.md``) and the refusals agree.
``python -m eaglequant.engines.module_support`` rewrites both tables in ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, Words, suggested, words
from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.engines import ENGINES, Engine, RuntimeModule
from eaglequant.engines.cells import Answer
from eaglequant.engines.support import MATRIX_END, MATRIX_START, loaded_kinds, render_markdown, support
from eaglequant.formats import FORMATS, Format
from eaglequant.kinds import KindPair, kinds_title

# The table's questions, in its column order: key -> column title; the first two are modules a conversion may ask
# to run quantized (MODULE_QUESTIONS).
MODULE_QUESTIONS = ("lm_head", "fc")
QUESTIONS: dict[str, str] = {
    "lm_head": "lm_head quantized",
    "fc": "fc quantized",
    "module_kinds": "per-module kinds (mixed)",
    "pruned_vocabulary": "pruned vocabulary (d2t/t2d)",
}
ATTENTIONS = {"mha": "Llama", "mla": "MLA"}  # the drafts each answer is asked for, as the table titles them
SEE_TABLE = "`eaglequant schemes` shows what each engine runs per module"

# The module each question asks about (a decoder linear for per-module kinds), as the engine would build it.
_ASKED_MODULES: dict[str, tuple[str, ...]] = {
    "lm_head": ("lm_head",),
    "fc": ("fc",),
    "module_kinds": ("layers.0.mlp.down_proj",),
}


def _asked_module(question: str, attention: str) -> RuntimeModule:
    members = _ASKED_MODULES[question]
    names = {"lm_head": "lm_head", "fc": "model.fc"}.get(members[0], "model.layers.1.mlp.down_proj")
    return RuntimeModule((names,), members, (0,), attention)


def answer(engine: Engine, fmt: Format, question: str, attention: str) -> Answer:
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


def _by_draft(said: dict[str, Answer]) -> dict[str, Answer]:
    """attention -> answer, keyed as the table titles the drafts (``llama``, ``mla``)."""
    return {ATTENTIONS[attention].lower(): answer for attention, answer in said.items()}


@dataclass(frozen=True)
class ModuleRow(JsonRecord):
    """One engine release and format: each question's answer for Llama and for MLA drafts (a field per question of
    :data:`QUESTIONS`, in its order: attention -> answer)."""

    json_renamed = named(title="release")
    json_values = named(**dict.fromkeys(QUESTIONS, _by_draft))

    engine: str
    title: str
    format: str
    lm_head: dict[str, Answer]
    fc: dict[str, Answer]
    module_kinds: dict[str, Answer]
    pruned_vocabulary: dict[str, Answer]

    def said(self, question: str) -> dict[str, Answer]:
        """attention -> the answer to ``question``."""
        answers: dict[str, Answer] = getattr(self, question)
        return answers

    def mark(self, question: str) -> str:
        """``yes``, ``no``, or the drafts it holds for (``Llama``, ``MLA``)."""
        said = self.said(question)
        held = [ATTENTIONS[a] for a in ATTENTIONS if said[a].yes]
        return "yes" if len(held) == len(ATTENTIONS) else (" ".join(held) if held else "no")

    def text(self, question: str) -> str:
        """The answer with its source: ``yes: ...``, or one per kind of draft where they differ."""
        said = self.said(question)
        first = said["mha"]
        if all(a == first for a in said.values()):
            return f"{'yes' if first.yes else 'no'}: {first.why}"
        return "; ".join(f"{ATTENTIONS[a]}: {'yes' if said[a].yes else 'no'}, {said[a].why}" for a in ATTENTIONS)


def module_table() -> list[ModuleRow]:
    """Every registered engine release and format, with each question's answers."""
    return [
        ModuleRow(
            name,
            engine.titled,
            fmt.name,
            **{q: {a: answer(engine, fmt, q, a) for a in ATTENTIONS} for q in QUESTIONS},
        )
        for name, engine in ENGINES.items()
        for fmt in FORMATS.values()
    ]


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


def request_refusal(engine: Engine, fmt: Format, request: ModuleRequest, attention: str) -> str | None:
    """Why ``engine`` cannot serve ``request`` from a ``fmt`` checkpoint (None: it can)."""
    title = fmt.title
    if request.mixed:
        said = answer(engine, fmt, "module_kinds", attention)
        if not said.yes:
            return said.why if said.why.startswith(engine.titled) else f"{engine.titled}: {said.why}"
    for kinds in request.kinds:
        cell = support(kinds, fmt.name, engine, attention)
        if cell is None:
            return f"{title} cannot store {kinds_title(kinds)}"
        if not cell.loads:
            return f"{engine.titled} does not load {kinds_title(kinds)} in {title}: {cell.note}"
    for module in request.modules:
        said = answer(engine, fmt, module, attention)
        if not said.yes:
            return f"{engine.titled} runs {module} unquantized in {title}: {said.why}"
    return None


def working_formats(engines: Sequence[Engine], request: ModuleRequest, attention: str) -> list[Format]:
    """The formats in which every one of ``engines`` serves ``request``."""
    return [f for f in FORMATS.values() if all(request_refusal(e, f, request, attention) is None for e in engines)]


def module_hint(engines: Sequence[Engine], request: ModuleRequest, attention: str) -> Words:
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
    engines: Sequence[Engine], fmt: Format, request: ModuleRequest, attention: str, described: str
) -> None:
    """Refuse, naming what works, a ``request`` some targeted engine cannot serve from a ``fmt``
    checkpoint; ``described``: the conversion's schemes in words."""
    for engine in engines:
        refusal = request_refusal(engine, fmt, request, attention)
        if refusal is not None:
            raise InputError(f"{refusal} ({described})", hint=module_hint(engines, request, attention))


def _titles(engines: list[Engine]) -> str:
    names = [e.titled for e in engines]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _joined(pieces: list[Any]) -> list[Any]:
    joined: list[Any] = []
    for i, piece in enumerate(pieces):
        joined += [", " if i else "", piece]
    return joined


def render_module_markdown() -> str:
    """The table as Markdown (rows: engine release × format; columns: the questions)."""
    lines = [
        "| engine | format | " + " | ".join(QUESTIONS.values()) + " |",
        "|" + "---|" * (2 + len(QUESTIONS)),
    ]
    for row in module_table():
        lines.append(f"| {row.title} | {row.format} | " + " | ".join(row.text(q) for q in QUESTIONS) + " |")
    return "\n".join(lines) + "\n"


MODULES_START, MODULES_END = "<!-- module-support:start -->", "<!-- module-support:end -->"


def update_docs(path: str = "docs/engines.md") -> None:
    """Rewrite the support matrix's and this table's blocks in ``docs/engines.md`` from the engine models."""
    from pathlib import Path

    doc = Path(path)
    text = doc.read_text(encoding="utf-8")
    for start, end, body in ((MATRIX_START, MATRIX_END, render_markdown()), (MODULES_START, MODULES_END, None)):
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{body or render_module_markdown()}{end}{tail}"
    doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    update_docs()
