"""The two tables ``eaglequant schemes`` and ``docs/engines.md`` show, drawn from the engine models: the support
matrix (scheme × format × engine release, :data:`eaglequant.engines.support.MATRIX`) and what each release runs per
module, per format: ``lm_head`` quantized, ``fc`` quantized, per-module kinds (a checkpoint whose linears are stored
in different kinds) and a pruned draft vocabulary (``d2t`` / ``t2d``).

Every answer is the engine model's own decision on the module asked about (:func:`eaglequant.engines.support.answer`),
the very answers ``convert`` refuses by, so the tables and the refusals agree.
``python -m eaglequant.engines.support_tables`` rewrites both tables in ``docs/engines.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.json_fields import JsonObject, JsonRecord, named
from eaglequant.engines import ENGINES
from eaglequant.engines.cells import Answer, Support
from eaglequant.engines.support import ENGINE_NAMES, FORMAT_NAMES, MATRIX, SCHEME_KINDS, answer
from eaglequant.formats import FORMATS
from eaglequant.layouts.head import Attention

# The table's questions, in its column order: key -> column title; the first two are modules a conversion may ask
# to run quantized (support.MODULE_QUESTIONS).
QUESTIONS: dict[str, str] = {
    "lm_head": "lm_head quantized",
    "fc": "fc quantized",
    "module_kinds": "per-module kinds (mixed)",
    "pruned_vocabulary": "pruned vocabulary (d2t/t2d)",
}
ATTENTIONS = {
    Attention.MHA: "Llama",
    Attention.MLA: "MLA",
}  # the drafts each answer is asked for, as the table titles them
NOT_LOADED = "not loaded"
RUN_ENGINES = ("vllm", "sglang")  # loaded by the engine-load tests (eaglequant.engine_load.PROBES)


def _by_draft(said: dict[Attention, Answer]) -> dict[str, Answer]:
    """attention -> answer, keyed as the table titles the drafts (``llama``, ``mla``)."""
    return {ATTENTIONS[attention].lower(): answer for attention, answer in said.items()}


def _read_by_draft(obj: JsonObject, key: str) -> dict[Attention, Answer]:
    """:func:`_by_draft`'s entries under ``key`` read back: attention -> answer."""
    titled = {title.lower(): attention for attention, title in ATTENTIONS.items()}
    obj.child(key).refuse_unknown(titled)
    return {titled[name]: Answer.from_json(entry) for name, entry in obj.child_map(key).items()}


@dataclass(frozen=True)
class ModuleRow(JsonRecord):
    """One engine release and format: each question's answer for Llama and for MLA drafts (a field per question of
    :data:`QUESTIONS`, in its order: attention -> answer)."""

    json_renamed = named(title="release")
    json_values = named(**dict.fromkeys(QUESTIONS, _by_draft))
    json_read = named(**dict.fromkeys(QUESTIONS, _read_by_draft))

    engine: str
    title: str
    format: str
    loads: bool  # the release loads some built-in scheme in this format; if not, its answers are moot
    lm_head: dict[Attention, Answer]
    fc: dict[Attention, Answer]
    module_kinds: dict[Attention, Answer]
    pruned_vocabulary: dict[Attention, Answer]

    def said(self, question: str) -> dict[Attention, Answer]:
        """attention -> the answer to ``question``."""
        answers: dict[Attention, Answer] = getattr(self, question)
        return answers

    def mark(self, question: str) -> str:
        """``yes``, ``no``, the drafts it holds for (``Llama``, ``MLA``), or ``not loaded`` for a format the release
        loads in no scheme."""
        if not self.loads:
            return NOT_LOADED
        said = self.said(question)
        held = [ATTENTIONS[a] for a in ATTENTIONS if said[a].yes]
        return "yes" if len(held) == len(ATTENTIONS) else (" ".join(held) if held else "no")

    def text(self, question: str) -> str:
        """The answer with its source: ``yes: ...``, or one per kind of draft where they differ."""
        if not self.loads:
            return f"{NOT_LOADED}: {self.title} loads no scheme in {self.format}"
        said = self.said(question)
        first = said[Attention.MHA]
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
            _loads_format(name, fmt.name),
            **{q: {a: answer(engine, fmt, q, a) for a in ATTENTIONS} for q in QUESTIONS},
        )
        for name, engine in ENGINES.items()
        for fmt in FORMATS.values()
    ]


def _loads_format(engine: str, format_name: str) -> bool:
    return any(cells[engine].loads for (_, fmt), cells in MATRIX.items() if fmt == format_name)


def evidence(engine: str) -> str:
    """ "run" when the engine-load tests load every fixture in the engine's cells, else "read" (from source)."""
    return "run" if engine in RUN_ENGINES else "read"


def _cell_text(cell: Support, engine: str) -> str:
    text = f"{'yes' if cell.loads else 'no'} ({evidence(engine)}): {cell.note}"
    if cell.loads and cell.mla is not True:
        text += f"; MLA drafts: no{f', {cell.mla}' if isinstance(cell.mla, str) else ''}"
    return text


def render_markdown() -> str:
    """The matrix as a Markdown table (rows: scheme × format; columns: engines)."""
    header = "| scheme | format | " + " | ".join(engine.titled for engine in ENGINES.values()) + " |"
    lines = [header, "|" + "---|" * (2 + len(ENGINE_NAMES))]
    for kinds, title in SCHEME_KINDS.items():
        for fmt in FORMAT_NAMES:
            cell = MATRIX.get((kinds, fmt))
            if cell is None:
                cells = ["— (format cannot store it)"] + [""] * (len(ENGINE_NAMES) - 1)
            else:
                cells = [_cell_text(cell[e], e) for e in ENGINE_NAMES]
            lines.append(f"| {title} | {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


MATRIX_START, MATRIX_END = "<!-- support-matrix:start -->", "<!-- support-matrix:end -->"


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
    write_text_whole(doc, text)


if __name__ == "__main__":
    update_docs()
