"""``eaglequant verify DST``: structure for each engine, per-layer kernel parity, draft-head fidelity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import (
    MAX_GENERATED_TOKENS,
    MAX_SEED,
    MaxDraftTokensOpt,
    PredictDeviceOpt,
    QuantizedDstArg,
    SourceOpt,
    TargetConfigOpt,
    TargetLayersOpt,
)
from eaglequant.cli.output import absolute, note, out, plural, result
from eaglequant.cli.progress_display import phase
from eaglequant.cli.tables import acceptance_table, name_column, show
from eaglequant.common.draft_tokens import DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.record.verification import Verdict
from eaglequant.verification.fidelity import DEFAULT_TOKENS

if TYPE_CHECKING:
    from eaglequant.engine_load import LoadCheck
    from eaglequant.prediction.figures import PredictionRecord
    from eaglequant.schemes.model import VerifyThresholds
    from eaglequant.verification.fidelity import HeadFidelity
    from eaglequant.verification.layer_parity import LayerParity
    from eaglequant.verification.verify import VerifyReport


def verify_command(
    dst: QuantizedDstArg,
    source: SourceOpt = None,
    engine: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--engine",
            "-e",
            help="Engines that must load DST, their loading checked (default: those DST was made for). 'all': every "
            "engine that can load DST's scheme and format, as explain --engine all.",
        ),
    ] = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed of the activations and draft inputs.")
    ] = 0,
    tokens: Annotated[
        int, typer.Option("--tokens", min=2, max=MAX_GENERATED_TOKENS, help="Draft positions in the fidelity run.")
    ] = DEFAULT_TOKENS,
    load_with: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--load-with",
            help="Also load DST with this engine's own code on CPU (vllm or sglang; repeatable): per module, the "
            "quantization method it picks, the tensors it consumes, and whether the loaded values equal the file.",
        ),
    ] = None,
    inputs: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--inputs",
            help="Captured draft inputs (the --calib file format) for the draft-head fidelity run, instead of "
            "seeded synthetic ones.",
            show_default=False,
        ),
    ] = None,
    engine_python: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--engine-python",
            help="Python interpreter that has the --load-with engine installed (default: this one if it has it, else "
            "./.venv-ENGINE, else .venv-ENGINE beside this venv, as scripts/setup.sh --test makes them).",
            show_default=False,
        ),
    ] = None,
    max_draft_tokens: MaxDraftTokensOpt = DEFAULT_MAX_DRAFT_TOKENS,
    device: PredictDeviceOpt = "cpu",
) -> None:
    """Check DST: structure per engine, per-layer kernel parity, draft-head fidelity.

    Thresholds come from the verify table of the scheme DST was converted with (recorded in its report). Exits 3
    when a check fails, 5 when the others hold but parity and fidelity could not run (no source), 7 when every
    check holds but the predicted acceptance's interval straddles its budget (too few prompts to tell).
    """

    def body() -> Verdict:
        from eaglequant.api import verify

        with phase("verifying"):
            report = verify(
                dst,
                source=source,
                engines=engine or [],
                target_layers=target_layers,
                target_config=target_config,
                seed=seed,
                tokens=tokens,
                load_with=load_with or [],
                engine_python=engine_python,
                inputs=inputs,
                max_draft_tokens=max_draft_tokens,
                device=device,
            )
        destination, recorded_source = absolute(report.destination), _recorded_source(dst)
        from eaglequant.verification.verify import VerifyOutput

        shown = VerifyOutput(replace(report, destination=report.destination.absolute()), recorded_source)
        result(shown.to_json(), lambda: render(report, str(destination), recorded_source))
        return report.verdict

    verdict = run_guarded(body)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


def _recorded_source(dst: Path) -> str | None:
    """The source DST's report records (where verify looks when --source is not given), absolute; None without."""
    from eaglequant.record.report import read_report, recorded_source

    recorded = recorded_source(read_report(Path(dst)))
    return None if recorded is None else absolute(recorded)


def _without_count(inputs: str, tokens: int) -> str:
    """``synthetic: seed 0, 256 positions`` -> ``synthetic: seed 0``: the line already says how many positions."""
    return inputs.removesuffix(f", {tokens} positions").replace(f", {tokens} positions)", ")")


def render(report: VerifyReport, destination: str, recorded_source: str | None = None) -> None:
    """``recorded_source``: the source DST's report records (named when parity and fidelity could not run)."""
    limits = report.thresholds
    out.print(
        f"[bold]{escape(destination)}[/]: {report.format}, {escape(report.schemes_described)} ({report.scheme_label})"
    )
    if report.layers:
        show(_parity_table(report.layers, limits))
    if report.fidelity is not None:
        _render_fidelity(report.fidelity, limits)
    if report.acceptance is not None:
        _render_acceptance(report.acceptance)
    for load in report.engine_loads:
        render_engine_load(load)
    for text in report.notes:
        note(text)
    if report.verdict == Verdict.PASSED:
        out.print(f"[green]ok[/]: {', '.join(report.checks)} hold", markup=True)
    elif report.verdict == Verdict.NOT_VERIFIED:
        why = (
            "DST has no report naming its source"
            if recorded_source is None
            else f"its recorded source, {recorded_source}, is gone"
        )
        out.print(
            f"[yellow]not verified numerically[/]: {', '.join(report.checks)} hold, but parity and fidelity did "
            f"not run: {escape(why)} (pass --source SRC, the checkpoint DST was made from); `eaglequant upload` "
            "refuses it",
            markup=True,
        )
    elif report.verdict == Verdict.INCONCLUSIVE:
        out.print(f"[yellow]inconclusive[/]: {escape(_inconclusive_text(report))}", markup=True, soft_wrap=True)
    for problem in report.problems:
        out.print(f"[bold red]problem[/]: {escape(str(problem))}", markup=True, soft_wrap=True)


def _inconclusive_text(report: VerifyReport) -> str:
    """Why a verification whose checks hold is not a pass: the predicted acceptance's interval straddles its budget."""
    acceptance = report.acceptance
    assert acceptance is not None
    more = acceptance.more_sequences
    settle = "more would tell" if more is None else f"{more} more would settle it at this variance"
    return (
        f"{', '.join(report.checks)} hold, but the predicted acceptance's interval straddles the budget: "
        f"{acceptance.quantized.prompts} captured sequences cannot tell whether DST is within it, {settle} "
        "(capture more prompts); "
        "`eaglequant upload` refuses it"
    )


def _render_fidelity(fidelity: HeadFidelity, limits: VerifyThresholds) -> None:
    parts = [f"hidden cosine {fidelity.hidden_cosine:.5f}"]
    shift, floor = fidelity.shift, fidelity.floor
    if shift is not None:
        parts[:0] = [
            f"mean TV {shift.mean_tv:.4f} ± {shift.tv_spread:.4f} (≤ {limits.max_mean_tv}: the "
            "acceptance-rate drop it allows)",
            f"mean KL {shift.mean_kl:.2e} (≤ {limits.max_mean_kl})",
            f"top-1 agreement {shift.top1_agreement:.3f} ({plural(shift.flips, 'flip')}, "
            f"{shift.noise_flips:.1f} explained by noise)",
        ]
    inputs = _without_count(fidelity.inputs, fidelity.tokens)
    out.print(f"draft head over {fidelity.tokens} positions ({inputs}): " + ", ".join(parts))
    if floor is not None:
        out.print(
            f"  the source draft in bf16 arithmetic (first {fidelity.floor_positions} positions): "
            f"mean TV {floor.mean_tv:.4f}, top-1 agreement {floor.top1_agreement:.3f}"
        )


def _render_acceptance(prediction: PredictionRecord) -> None:
    """The change (DST minus source) with the bound that decided against the budget (a drop, positive)."""
    source, quantized = prediction.source.acceptance_length, prediction.quantized.acceptance_length
    verdict = prediction.judged
    judged = f"{prediction.difference.text(signed=True)} (no budget)" if verdict is None else verdict.text()
    out.print(
        f"acceptance predicted on {escape(prediction.inputs)} ({prediction.rule}): "
        f"{source.value_text(3)} → {quantized.value_text(3)} tokens, change {escape(judged)}",
        soft_wrap=True,
    )
    if prediction.by_draft_tokens is not None:
        show(acceptance_table(prediction.by_draft_tokens))


def _parity_table(layers: list[LayerParity], limits: VerifyThresholds) -> Table:
    """One row per quantized linear; the backend goes to the title when every row shares it."""
    backends = {row.backend for row in layers}
    title = "per-layer parity: the fused kernel's GEMM output against the source GEMM's"
    if len(backends) == 1:
        title += f", {next(iter(backends))}"
    table = Table(title=title, title_justify="left")
    name_column(table, "module")
    if len(backends) > 1:
        table.add_column("backend")
    for header in (
        f"output SQNR dB ≥ {limits.min_sqnr_db}",
        f"output cosine ≥ {limits.min_cosine}",
        f"output rel. error ≤ {limits.max_relative_error}",
        f"worst weight block error ≤ {limits.max_block_relative_error}",
    ):
        table.add_column(header, justify="right")
    for row in layers:
        cells = [
            f"{row.sqnr_db:.1f}",  # not finite (an exact kernel) reads inf
            f"{row.cosine:.5f}",
            f"{row.relative_error:.4f}",
            f"{row.max_block_error:.4f}",
        ]
        module = f"{'[red]' if row.failed else ''}{escape(row.module)}"
        table.add_row(module, *([row.backend] if len(backends) > 1 else []), *cells)
    return table


def render_engine_load(load: LoadCheck) -> None:
    from eaglequant.engine_load import PROBES

    engine = PROBES[load.engine].title if load.engine in PROBES else load.engine
    title = f"{engine} {load.version} loading {load.checkpoint}"
    if not load.loaded:
        out.print(f"[bold]{escape(title)}[/]: [red]failed[/]: {escape(str(load.error))}", markup=True)
    table = Table(title=title, title_justify="left")
    name_column(table, "runtime module")
    for col in ("method", "planned", "tensors", "values", "GEMM rel. error"):
        table.add_column(col, overflow="fold")
    for row in load.modules:
        planned = row.planned
        mismatch = planned is not None and planned != row.quantized
        relative = row.gemm_relative_error
        table.add_row(
            f"{'[red]' if mismatch else ''}{escape(row.name)}",
            escape(str(row.quant_method).rsplit("/", 1)[-1]),  # the scheme class says it all
            "—" if planned is None else ("quantized" if planned else "unquantized"),
            str(len(row.tensors)),
            "equal" if row.values_equal else "[red]differ[/]",
            "—" if relative is None else f"{relative:.4f}",
        )
    if load.modules:
        show(table)
    for text in load.notes:
        note(text)
    for patch in load.patches:
        out.print(f"  [dim]patched for CPU: {escape(patch)}[/]", markup=True)


def register(app: typer.Typer) -> None:
    app.command("verify", cls=Command)(verify_command)
