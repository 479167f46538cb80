"""The model card (``README.md``) written into every converted checkpoint.

Rendered only from what the destination records (``eaglequant_report.json``; when verified,
``eaglequant_verify.json``; when ``accept`` measured it, ``eaglequant_accept.json``), so it always shows the
figures of the conversion it sits beside, and can be re-rendered later (``upload`` does, to name the draft by
its Hub repo id).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.engines import ENGINES, engine_title
from eaglequant.engines.support import MODULE_QUESTIONS, ModuleRequest, request_refusal
from eaglequant.formats import FORMATS
from eaglequant.publish.card_source import CARD_NAME
from eaglequant.publish.cost_sections import round_cost_section, search_section, speedup_section
from eaglequant.record.report import REPORT_NAME, CardContext, ConversionReport
from eaglequant.record.search import served_draft_tokens
from eaglequant.record.verification import VerificationRecord

if TYPE_CHECKING:
    from eaglequant.measurement.record import AcceptanceRecord
    from eaglequant.record.search import SearchRecord
    from eaglequant.verification.verify import VerifyReport

DRAFT_TOKENS = DEFAULT_DRAFT_TOKENS  # k: num_speculative_tokens / max_draft_len in the serving lines, and in a round


def render_card(
    report: ConversionReport,
    verification: VerificationRecord | None,
    acceptance: AcceptanceRecord | None = None,
    search: SearchRecord | None = None,
) -> str:
    """``report``: what ``eaglequant_report.json`` records (with its card context); ``verification``: what
    ``eaglequant_verify.json`` records, or None when the conversion was not verified; ``acceptance``: the dict in
    ``eaglequant_accept.json`` records, or None when ``accept`` has not measured it."""
    context = report.card
    assert context is not None, "a report written without a card context has no card"
    sections = [
        _front_matter(report, context),
        _title(report, context),
        _quantization_table(report),
        _quantized_table(report),
        _kept_table(report),
        _dtype_table(report),
        _size_table(report),
        round_cost_section(report, search),
        search_section(search),
        speedup_section(search),
        _verification(verification),
        _acceptance(acceptance),
        _serving(report, context, served_draft_tokens(search), served_schedule(search)),
        f"---\n\nWritten by eaglequant {report.eaglequant_version}; `{REPORT_NAME}` holds "
        "every figure above and the SHA-256 of each file.\n",
    ]
    return "\n".join(s for s in sections if s)


def _front_matter(report: ConversionReport, context: CardContext) -> str:
    from huggingface_hub import ModelCardData

    tags = ["eagle3", "speculative-decoding", "draft-model", "quantized", "eaglequant"]
    tags += [report.scheme_kinds.weight_kind.tag, report.format]
    fields: dict[str, Any] = {"library_name": library_name(report.engines), "tags": tags, **context.license}
    if context.base_model:
        fields.update(base_model=context.base_model, base_model_relation="quantized")
    return f"---\n{ModelCardData(**fields).to_yaml()}\n---\n"


def library_name(engines: Iterable[str]) -> str:
    """The first engine the conversion targeted (vLLM by default), as the Hub names it: the Hub's library_name
    says what loads the checkpoint, and transformers cannot load an EAGLE-3 draft quantized in these formats."""
    return next((ENGINES[e].hub_library for e in engines if e in ENGINES), ENGINES["vllm"].hub_library)


def _title(report: ConversionReport, context: CardContext) -> str:
    name = context.draft.rstrip("/").rsplit("/", 1)[-1]
    origin = f"`{report.source}`"
    if report.manifest is not None:
        source = report.manifest.source
        origin = f"`{source.path}`"
        if source.repo_id:
            origin = f"[`{source.repo_id}`](https://huggingface.co/{source.repo_id})"
            origin += f" (commit `{source.commit[:12]}`)" if source.commit else ""
    engines = _engine_releases(report)
    target = f" for `{context.target}`" if context.target else ""
    return (
        f"# {name}\n\n"
        f"An EAGLE-3 speculative-decoding draft head{target}, quantized from {origin} to "
        f"**{report.scheme}** ({report.scheme_label}) in **{FORMATS[report.format].title}** format. "
        f"Its exclusion rules were checked against the module names and matching rules of: {engines}.\n"
    )


def _scheme_name(scheme_toml: str) -> str:
    from eaglequant.common import toml

    return str(toml.loads(scheme_toml).get("name", "?"))


def _engine_releases(report: ConversionReport) -> str:
    return ", ".join(ENGINES[e].titled for e in report.engines)


def _quantization_table(report: ConversionReport) -> str:
    count = report.target_layers.count
    rows = [
        ("Scheme", f"`{report.scheme}` ({report.scheme_label})"),
        *((f"Scheme of `{module}`", f"`{_scheme_name(text)}`") for module, text in sorted(report.own_schemes.items())),
        ("Format", f"{FORMATS[report.format].title} (`{report.algorithm}`)"),
        ("Layout of the source", f"`{report.layout}`"),
        ("Engines checked", _engine_releases(report)),
        ("Target layer count", str(count) if count is not None else "any (rules hold for every L)"),
        ("Exclusion rules written", ", ".join(f"`{p}`" for p in report.exclude) or "none"),
    ]
    rows += [("Calibrated activation scales", "yes")] if report.calibrated_input_amax else []
    rows += [
        (f"config.json `{c.key}`", f"{c.source} in the source, {c.written} written: {c.reason}")
        for c in report.config_changes
    ]
    lines = ["## Quantization", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    lines += [f"\nNote: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def _quantized_table(report: ConversionReport) -> str:
    schemes = _module_scheme_names(report)
    scheme_column = "scheme | " if schemes else ""
    header = f"| module | {scheme_column}shape | weight SQNR (dB) | weight relative error |"
    lines = ["## Quantized modules", "", header, "|---|" + "---|" * bool(schemes) + "---|---:|---:|"]
    for row in report.quantized:
        shape = "×".join(str(d) for d in row.shape)
        scheme = f"`{schemes[row.module]}` | " if schemes else ""
        lines.append(f"| `{row.module}` | {scheme}{shape} | {row.sqnr_db:.1f} | {row.relative_error:.4f} |")
    lines.append("\nWeight SQNR and relative error: the stored weights, dequantized, against the source weights.")
    return "\n".join(lines) + "\n"


def _kept_table(report: ConversionReport) -> str:
    lines = ["## Kept unquantized", "", "| tensor | why |", "|---|---|"]
    for name, why in sorted(report.kept.items()):
        lines.append(f"| `{name}` | {why} |")
    return "\n".join(lines) + "\n"


def _dtype_table(report: ConversionReport) -> str:
    lines = ["## Tensor dtypes", "", "| dtype | tensors | bytes |", "|---|---:|---:|"]
    for dtype, total in sorted(report.tensor_dtypes.items()):
        lines.append(f"| `{dtype}` | {total.count} | {total.nbytes:,} |")
    return "\n".join(lines) + "\n"


def _size_table(report: ConversionReport) -> str:
    before, after = report.source_bytes, report.output_bytes
    return (
        "## Size\n\n| | bytes | |\n|---|---:|---:|\n"
        f"| source tensors | {before:,} | |\n"
        f"| quantized tensors | {after:,} | {after / max(before, 1):.2f}× |\n"
    )


def _verification(verification: VerificationRecord | None) -> str:
    if verification is None:
        return (
            "## Verification\n\nNot verified when written. Run `eaglequant verify <this directory> --source "
            "<the BF16 head>` for per-layer kernel parity and draft-head agreement.\n"
        )
    verdict = "passed" if verification.ok else "**FAILED**: " + "; ".join(map(str, verification.problems))
    if not verification.ok and not verification.problems:
        verdict = "not verified numerically (no source checkpoint)"
    limits = verification.thresholds
    lines = [
        "## Verification",
        "",
        f"`eaglequant verify` {verdict}. Each quantized linear was run through the fused dequant-GEMM kernel on "
        f"{verification.parity_rows} seeded BF16 activations and its output compared with the "
        f"source GEMM's (thresholds: output SQNR ≥ {limits.min_sqnr_db} dB, output cosine ≥ {limits.min_cosine}).",
        "",
        "| module | kernel | output SQNR (dB) | output cosine |",
        "|---|---|---:|---:|",
    ]
    for layer in verification.layers:
        lines.append(f"| `{layer.module}` | {layer.backend} | {layer.sqnr_db:.1f} | {layer.cosine:.5f} |")
    fidelity = verification.fidelity
    if fidelity:
        lines += ["", f"Whole draft head on {fidelity.tokens} positions, inputs {fidelity.inputs}:", ""]
        lines += ["| measure | value | threshold |", "|---|---:|---:|"]
        if fidelity.mean_tv is not None:
            lines.append(
                f"| mean total variation (bounds the acceptance-rate drop) | {fidelity.mean_tv:.4f} | "
                f"≤ {limits.max_mean_tv} |"
            )
        if fidelity.top1_agreement is not None and fidelity.mean_kl is not None:
            lines.append(f"| top-1 agreement | {fidelity.top1_agreement:.3f} | ≥ {limits.min_top1_agreement} |")
            lines.append(f"| mean KL (nats) | {fidelity.mean_kl:.2e} | ≤ {limits.max_mean_kl} |")
        lines.append(f"| final hidden cosine | {fidelity.hidden_cosine:.5f} | |")
    lines += [f"\nNote: {note}" for note in verification.notes]
    return "\n".join(lines) + "\n"


def _acceptance(acceptance: AcceptanceRecord | None) -> str:
    if acceptance is None:
        return ""
    source, settings = acceptance.source, acceptance.settings
    lines = [
        "## Acceptance",
        "",
        f"Measured with {engine_title(acceptance.engine, acceptance.version)}'s own EAGLE-3 speculative decoding "
        f"(`eaglequant accept`): target `{settings.target}`, {settings.draft_tokens} speculative "
        f"tokens, {settings.prompts} prompts ({settings.prompts_from}) × {settings.max_tokens} tokens. "
        "Acceptance length: tokens per target forward (1 + accepted drafted tokens); 95% intervals over prompts.",
        "",
        "| draft | mode | acceptance length | per position | vs source |",
        "|---|---|---:|---|---:|",
    ]
    for draft in (source, *acceptance.quantized):
        name = "source (BF16)" if draft.served_as == "source" else f"this checkpoint ({draft.served_as})"
        for mode, figures in draft.modes.items():
            positions = " / ".join(f"{p.value:.2f}" for p in figures.per_position if p.value is not None)
            versus = "" if figures.difference is None else figures.difference.text(signed=True)
            lines.append(f"| {name} | {mode} | {figures.acceptance_length.text()} | {positions} | {versus} |")
    for draft in (source, *acceptance.quantized):
        lossless = draft.lossless
        lines.append(
            f"\nGreedy output with the {'source' if draft.served_as == 'source' else 'quantized'} draft equals the "
            f"target's alone on {lossless.equal} of {lossless.prompts} prompts"
            + (
                f", and first departs from it at a near-tie of the target's own choice (top two within "
                f"{lossless.near_tie_nats} nats) on {lossless.near_ties}."
                if lossless.near_ties
                else "."
            )
        )
    lines += [f"\nNote: {note}" for note in acceptance.notes]
    lines += [f"\n**{_heading(problem.code)}**: {problem}" for problem in acceptance.problems]
    return "\n".join(lines) + "\n"


def _heading(code: str) -> str:
    """An unsettled budget is not a defect: more prompts would tell, and the card says so."""
    return "Inconclusive" if code == "acceptance-inconclusive" else "Problem"


def served_schedule(search: SearchRecord | None) -> tuple[tuple[int, int, int], ...]:
    """The k for each batch size ``search --objective speedup --concurrency`` chose, as vLLM's
    ``num_speculative_tokens_per_batch_size``; empty where one k serves every load."""
    return () if search is None or search.speedup is None else search.speedup.num_speculative_tokens_per_batch_size


def _serving(
    report: ConversionReport,
    context: CardContext,
    draft_tokens: int = DRAFT_TOKENS,
    schedule: tuple[tuple[int, int, int], ...] = (),
) -> str:
    target = context.target or "<target-model>"
    lines = ["## Serving", ""]
    if not context.target:
        lines += ["Replace `<target-model>` with the model this head drafts for.", ""]
    kinds, fmt = report.scheme_kinds, FORMATS[report.format]
    for name, engine in ENGINES.items():
        if name in report.engines:
            scheduled = engine.scheduled_snippets(target, context.draft, schedule) if schedule else None
            if schedule and scheduled is None:
                lines += [f"{ONE_K.format(engine=engine.titled, k=draft_tokens)}\n"]
            for snippet in scheduled or engine.serving_snippets(target, context.draft, draft_tokens):
                caption = f"{snippet.caption} (release {engine.release})"
                lines += [f"{caption}:", "", f"```{snippet.language}", snippet.text.rstrip("\n"), "```", ""]
            lines += [f"Note: {note}.\n" for note in engine.environment_notes(report.attention, kinds, fmt)]
            continue
        refusal = request_refusal(engine, fmt, _module_request(report), report.attention)
        if refusal is not None:
            lines += [f"{engine.titled}: does not load this checkpoint ({refusal}); {PER_MODULE_TABLE}.", ""]
        else:
            lines += [
                f"{engine.titled}: not checked for this engine; convert with `--engine {name}` "
                f"(or run `eaglequant explain <this directory> --engine {name}`) first.",
                "",
            ]
    return "\n".join(lines)


# Beside an engine that takes one k, where the search chose a k for each load.
ONE_K = (
    "{engine} takes one k for every batch: k = {k} below, the k of the heaviest load that speculates (see "
    "Predicted speed-up for the k at each load)."
)

# Where a reader finds what each engine runs per module (the table the refusal above is read from).
PER_MODULE_TABLE = "what each engine runs per module: `eaglequant schemes`, or docs/engines.md in eaglequant"


def _module_request(report: ConversionReport) -> ModuleRequest:
    """What the checkpoint asks of an engine: its schemes' kinds, fc or lm_head quantized, linears of mixed kinds."""
    from eaglequant.common import toml
    from eaglequant.schemes.model import parse_scheme

    own = [parse_scheme(toml.loads(text), f"own_schemes.{m}").kinds for m, text in sorted(report.own_schemes.items())]
    kinds = tuple(dict.fromkeys([report.scheme_kinds, *own]))
    quantized = {row.module.rsplit(".", 1)[-1] for row in report.quantized}
    return ModuleRequest(kinds, tuple(m for m in MODULE_QUESTIONS if m in quantized), len(kinds) > 1)


def _module_scheme_names(report: ConversionReport) -> dict[str, str]:
    """Each quantized module (as the report names it) -> the name of the scheme it is stored in, for a checkpoint
    whose linears have different kinds; empty otherwise."""
    from eaglequant.common import toml
    from eaglequant.layouts.names import parse_name
    from eaglequant.schemes.model import parse_scheme

    own = {m: parse_scheme(toml.loads(text), f"own_schemes.{m}") for m, text in report.own_schemes.items()}
    if all(scheme.kinds == report.scheme_kinds for scheme in own.values()):
        return {}
    canonical = {row.module: parse_name(f"{row.module}.weight").module for row in report.quantized}
    return {row: own[module].name if module in own else report.scheme for row, module in canonical.items()}


def rename_draft(dst: Path, draft: str) -> bool:
    """Re-render ``dst``'s card so its serving lines name the draft ``draft`` (e.g. the Hub repo it is
    uploaded to) and record the card's new SHA-256 in the report. False when there is nothing to change
    (already named so, or ``dst`` has no eaglequant report)."""
    from dataclasses import replace

    from eaglequant.record.report import read_report

    report = read_report(dst)
    if report is None or report.card is None or report.card.draft == draft:
        return False
    _rerender(dst, replace(report, card=replace(report.card, draft=draft)))
    return True


def write_card(directory: Path, report: ConversionReport, verification: VerifyReport | None) -> None:
    """The card of a conversion just written into ``directory`` (``verification``: when it was verified)."""
    record = None if verification is None else VerificationRecord.from_json(verification.to_json())
    rendered = render_card(report, record)
    (directory / CARD_NAME).write_text(rendered, encoding="utf-8")


def refresh_card(dst: Path) -> bool:
    """Re-render ``dst``'s card from what it records now (e.g. after ``accept`` measured it) and record the
    card's new SHA-256 in the report. False when ``dst`` has no eaglequant report with a card."""
    from eaglequant.record.report import read_report

    report = read_report(dst)
    if report is None or report.card is None:
        return False
    _rerender(dst, report)
    return True


def _rerender(dst: Path, report: ConversionReport) -> None:
    from dataclasses import replace

    from eaglequant.checkpoint.hashing import file_sha256
    from eaglequant.measurement.record import read_acceptance
    from eaglequant.record.search import read_search
    from eaglequant.record.verification import read_verification

    _replace(dst / CARD_NAME, render_card(report, read_verification(dst), read_acceptance(dst), read_search(dst)))
    report = replace(report, files={**report.files, CARD_NAME: file_sha256(dst / CARD_NAME)})
    _replace(dst / REPORT_NAME, report.to_text())


@contextmanager
def renamed_draft(dst: Path, draft: str) -> Iterator[bool]:
    """:func:`rename_draft` for the duration of the block; on an exception the card and report are put back
    as they were (an upload that failed leaves DST unchanged). Yields whether anything changed."""
    before = {name: (dst / name).read_bytes() for name in (CARD_NAME, REPORT_NAME) if (dst / name).is_file()}
    changed = rename_draft(dst, draft)
    try:
        yield changed
    except BaseException:
        for name, data in before.items():
            _replace(dst / name, data.decode("utf-8"))
        raise


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all."""
    write_text_whole(path, text)
