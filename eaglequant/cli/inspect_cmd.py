"""``eaglequant inspect SRC``: the layout, every tensor, and what a conversion would do. Headers only."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.options import (
    DraftTokensOpt,
    EngineOpt,
    ExcludeOpt,
    FormatOpt,
    QuantizeOpt,
    SchemeForOpt,
    SchemeOpt,
    SrcArg,
    TargetConfigOpt,
    TargetLayersOpt,
    given_options,
)
from eaglequant.cli.output import absolute, note, out, quiet_hub_progress, result
from eaglequant.cli.tables import name_column, show, show_round_costs
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.sizes import decimal_bytes
from eaglequant.conversion.options import DEFAULT_FORMAT, DEFAULT_SCHEME

if TYPE_CHECKING:
    from eaglequant.conversion.inspection import InspectReport


def inspect_command(
    src: SrcArg,
    scheme: SchemeOpt = DEFAULT_SCHEME,
    scheme_for: SchemeForOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    exclude: ExcludeOpt = None,
    quantize: QuantizeOpt = None,
    engine: EngineOpt = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
    draft_tokens: DraftTokensOpt = DEFAULT_DRAFT_TOKENS,
) -> None:
    """Show the detected layout and why, every tensor, what SCHEME would quantize, the output size, and the weight
    bytes each engine would read per speculative round."""
    from eaglequant.cli.guard import run_guarded

    parameters = dict(locals())

    def body() -> None:
        from eaglequant.api import inspect
        from eaglequant.hub.client import is_hub_reference

        if is_hub_reference(src):
            quiet_hub_progress()
        report = inspect(
            src,
            given_options(parameters),
            draft_tokens=draft_tokens,
        )
        source = absolute(report.source)
        shown = replace(report, source=report.source.absolute())
        result(shown.record().to_json(), lambda: render(report, str(source)))

    run_guarded(body)


def render(report: InspectReport, source: str) -> None:
    head, plan = report.head, report.plan
    out.print(f"[bold]{escape(source)}[/]  layout [cyan]{head.layout}[/] ({head.layout_title})")
    out.print(f"  why: {escape(head.reason)}")
    out.print("  dims: " + ", ".join(f"{k}={v}" for k, v in report.dims.items()))
    out.print(
        f"  attention {head.attention}, {head.num_layers} decoder layer(s), "
        f"features: {', '.join(head.features) or 'none'}"
    )
    show(_tensor_table(report))
    for row in report.tensor_plans():
        if row.kept_linear:  # why: too long for the table
            out.print(f"  [yellow]keep[/] {escape(row.tensor.name)}: {escape(row.reason)}")
    runtime = Table(title="how the engines will read the written config", title_justify="left")
    runtime.add_column("engine", no_wrap=True)
    name_column(runtime, "runtime module")
    runtime.add_column("quantized")
    runtime.add_column("rule", overflow="fold")
    for verdict in plan.verdicts:
        rule = escape(verdict.rule or "")
        if verdict.engine_reason:
            rule += f"{' ' if rule else ''}[dim](engine: {escape(verdict.engine_reason)})[/]"
        runtime.add_row(verdict.engine, verdict.runtime_name, "yes" if verdict.quantized else "no", rule)
    show(runtime)
    target = plan.target
    out.print(f"target layers: {target.count if target.count is not None else 'L'} ({escape(target.source)})")
    out.print(f"exclude rules written: {escape(str(list(plan.exclude_patterns)))}")
    src_b, out_b = report.source_bytes, plan.output_bytes
    out.print(f"size: {decimal_bytes(src_b)} → ~{decimal_bytes(out_b)} ({out_b / max(src_b, 1):.2f}×)")
    show_round_costs(list(report.round_costs))
    for text in plan.notes:
        note(text)


def _tensor_table(report: InspectReport) -> Table:
    """Every tensor of the head, with its shard when there are several, and what the plan does with it."""
    files = report.files
    multi_file = len(files) > 1
    table = Table(title=f"tensors ({report.source_format}, {len(files)} file(s))", title_justify="left")
    name_column(table, "name")
    shard_of = {name: f"{i}/{len(files)}" for i, name in enumerate(files, start=1)}
    for col in ("dtype", "shape", "size") + (("shard",) if multi_file else ()):
        table.add_column(col, no_wrap=True)
    table.add_column(f"{report.plan.scheme.name} → {report.plan.format.name}")
    for row in report.tensor_plans():
        tensor, info = row.tensor, row.tensor.info
        if row.quantized:
            action = "[green]quantize[/]"
        elif row.kept_linear:
            action = "[yellow]keep[/] (see below)"
        else:
            action = f"[dim]keep: {tensor.role.value.replace('_', ' ')}[/]"
        cells = [escape(tensor.name), info.dtype, str(list(info.shape)), decimal_bytes(info.nbytes)]
        table.add_row(*cells, *([shard_of.get(info.file.name, info.file.name)] if multi_file else []), action)
    return table


def register(app: typer.Typer) -> None:
    app.command("inspect", cls=Command)(inspect_command)
