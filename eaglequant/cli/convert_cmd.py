"""``eaglequant convert SRC DST``: quantize a head and write it atomically."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.options import (
    DstArg,
    EngineOpt,
    ExcludeOpt,
    FormatOpt,
    QuantizeOpt,
    SchemeForOpt,
    SchemeOpt,
    SrcArg,
    TargetConfigOpt,
    TargetLayersOpt,
    WorkersOpt,
    conversion_flag,
    given_options,
)
from eaglequant.cli.output import MODE, absolute, info, note, out, quiet_hub_progress, result
from eaglequant.cli.progress_display import progress_display, shown
from eaglequant.cli.tables import name_column, show, show_round_costs
from eaglequant.common.errors import EXIT_CHECK_FAILED
from eaglequant.common.sizes import decimal_bytes
from eaglequant.conversion.options import DEFAULT_DEVICE, DEFAULT_FORMAT, DEFAULT_MAX_SHARD_SIZE, DEFAULT_SCHEME

if TYPE_CHECKING:
    from eaglequant.conversion.result import ConversionResult


def convert_command(
    src: SrcArg,
    dst: DstArg,
    scheme: SchemeOpt = DEFAULT_SCHEME,
    scheme_for: SchemeForOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    exclude: ExcludeOpt = None,
    quantize: QuantizeOpt = None,
    engine: EngineOpt = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
    match_context: Annotated[bool, conversion_flag("match_target_context")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace DST if an earlier eaglequant convert wrote it.")
    ] = False,
    overwrite_any: Annotated[
        bool,
        typer.Option(
            "--overwrite-any",
            help="Replace DST whatever it holds, even a directory eaglequant did not write: its files are deleted.",
        ),
    ] = False,
    max_shard_size: Annotated[str, conversion_flag("max_shard_size")] = DEFAULT_MAX_SHARD_SIZE,
    calib: Annotated[Optional[Path], conversion_flag("calib")] = None,  # noqa: UP045 - Typer needs Optional on 3.10
    verify: Annotated[bool, conversion_flag("verify_output")] = False,
    repo_id: Annotated[Optional[str], conversion_flag("repo_id")] = None,  # noqa: UP045
    workers: WorkersOpt = None,
    device: Annotated[str, conversion_flag("device")] = DEFAULT_DEVICE,
) -> None:
    """Quantize the head in SRC with SCHEME and write it to DST in FORMAT, with a model card (README.md)."""
    from eaglequant.cli.guard import run_guarded

    parameters = dict(locals())

    def body() -> int:
        from eaglequant.api import convert
        from eaglequant.hub.client import is_hub_reference

        if is_hub_reference(src):
            quiet_hub_progress()
        with shown(progress_display()) as display:
            if not is_hub_reference(src):
                display.phase("reading")  # headers, the plan, and with --calib the calibration run
            converted = convert(
                src,
                dst,
                given_options(parameters),
                overwrite=overwrite,
                overwrite_any=overwrite_any,
                progress=display,
            )
        destination = str(converted.destination.absolute())
        verification = converted.verification
        if verification is not None:
            verification = replace(verification, destination=converted.destination.absolute())
        from eaglequant.jobs.conversion import ConvertOutput

        printed = ConvertOutput(replace(converted.report(timed=True), destination=destination), verification)
        result(printed.to_json(), lambda: render(converted))
        for text in converted.plan.notes:
            note(text)
        if converted.verification is not None and not converted.verification.ok:
            info(
                f"[bold red]verification failed[/]: the output is at {escape(str(converted.destination))}, not at "
                f"{escape(str(dst))}, which was left as it was; `eaglequant upload` refuses it",
                markup=True,
            )
        if converted.verification is None:
            return 0
        return converted.verification.verdict.exit_code if converted.verification.ok else EXIT_CHECK_FAILED

    code = run_guarded(body)
    if code:
        raise typer.Exit(code)


def render(converted: ConversionResult) -> None:
    """The tables, the rules and the cost of a round; with --quiet only the line saying what was written."""
    report = converted.report()
    if MODE.quiet:
        _render_written(converted)
        if converted.verification is not None:
            out.print(f"verification: {converted.verification.verdict}", soft_wrap=True)
        return
    table = Table(title=f"{report.scheme} → {report.format} ({report.layout})", title_justify="left")
    name_column(table, "quantized module")
    for col in ("shape", "weight rel. error", "weight SQNR dB"):
        table.add_column(col)
    for linear in report.quantized:
        shape = str(list(linear.shape))
        table.add_row(escape(linear.module), shape, f"{linear.relative_error:.4f}", f"{linear.sqnr_db:.1f}")
    show(table)
    for name, why in report.excluded_linears.items():
        out.print(f"  kept {escape(name)}: {escape(why)}", soft_wrap=True)
    rules = escape(str(list(report.exclude)))
    out.print(f"exclude rules written for {', '.join(report.engines)}: {rules}", soft_wrap=True)
    _render_written(converted)
    show_round_costs(list(report.round_costs))
    if converted.verification is not None:
        from eaglequant.cli.verify_cmd import render as render_verification

        destination = str(absolute(converted.destination))
        render_verification(converted.verification, destination)  # where the output is, verified or not


def _render_written(converted: ConversionResult) -> None:
    report = converted.report()
    src_b, out_b = report.source_bytes, report.output_bytes
    out.print(
        f"[green]wrote[/] {escape(str(absolute(converted.destination)))}: {decimal_bytes(src_b)} → "
        f"{decimal_bytes(out_b)} ({out_b / max(src_b, 1):.2f}×) in {converted.reported_seconds} s",
        markup=True,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command("convert", cls=Command)(convert_command)
