"""``eaglequant inspect SRC``: the layout, every tensor, and what a conversion would do. Headers only."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.options import (
    EngineOpt,
    ExcludeOpt,
    FormatOpt,
    QuantizeOpt,
    SchemeOpt,
    SrcArg,
    TargetConfigOpt,
    TargetLayersOpt,
    conversion_options,
)
from eaglequant.cli.output import absolute, human_bytes, out, quiet_hub_progress, result
from eaglequant.cli.tables import name_column, show
from eaglequant.conversion.options import DEFAULT_FORMAT, DEFAULT_SCHEME


def inspect_command(
    src: SrcArg,
    scheme: SchemeOpt = DEFAULT_SCHEME,
    format: FormatOpt = DEFAULT_FORMAT,
    exclude: ExcludeOpt = None,
    quantize: QuantizeOpt = None,
    engine: EngineOpt = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
) -> None:
    """Show the detected layout and why, every tensor, what SCHEME would quantize, and the output size."""
    from eaglequant.cli.guard import run_guarded

    def body() -> None:
        from eaglequant.api import inspect
        from eaglequant.hub.client import is_hub_reference

        if is_hub_reference(src):
            quiet_hub_progress()
        report = inspect(
            src,
            conversion_options(
                scheme=scheme,
                format=format,
                exclude=exclude,
                quantize=quantize,
                engines=engine,
                target_layers=target_layers,
                target_config=target_config,
            ),
        )
        data = report.to_json()
        data["source"] = absolute(data["source"])
        result(data, lambda: render(data))

    run_guarded(body)


def render(data: dict[str, Any]) -> None:
    out.print(f"[bold]{escape(data['source'])}[/]  layout [cyan]{data['layout']}[/] ({data['layout_title']})")
    out.print(f"  why: {escape(data['reason'])}")
    dims = data["dims"]
    assert isinstance(dims, dict)
    out.print("  dims: " + ", ".join(f"{k}={v}" for k, v in dims.items()))
    out.print(
        f"  attention {data['attention']}, {data['num_layers']} decoder layer(s), "
        f"features: {', '.join(data['features']) or 'none'}"
    )
    multi_file = len(data["files"]) > 1
    table = Table(title=f"tensors ({data['source_format']}, {len(data['files'])} file(s))", title_justify="left")
    name_column(table, "name")
    shard_of = {name: f"{i}/{len(data['files'])}" for i, name in enumerate(data["files"], start=1)}
    for col in ("dtype", "shape", "size") + (("shard",) if multi_file else ()):
        table.add_column(col, no_wrap=True)
    table.add_column(f"{data['scheme']} → {data['format']}")
    long_reasons = {}
    for row in data["tensors"]:
        if row["action"] == "quantize":
            action = "[green]quantize[/]"
        elif row["role"] == "linear":
            action = "[yellow]keep[/] (see below)"
            long_reasons[row["name"]] = row["reason"]
        else:
            action = f"[dim]keep: {row['role'].replace('_', ' ')}[/]"
        cells = [escape(row["name"]), row["dtype"], str(row["shape"]), human_bytes(row["bytes"])]
        table.add_row(*cells, *([shard_of.get(row["file"], row["file"])] if multi_file else []), action)
    show(table)
    for name, reason in long_reasons.items():
        out.print(f"  [yellow]keep[/] {escape(name)}: {escape(reason)}")
    runtime = Table(title="how the engines will read the written config", title_justify="left")
    runtime.add_column("engine", no_wrap=True)
    name_column(runtime, "runtime module")
    runtime.add_column("quantized")
    runtime.add_column("rule", overflow="fold")
    for row in data["runtime_modules"]:
        rule = escape(row["rule"] or "")
        if row["engine_reason"]:
            rule += f"{' ' if rule else ''}[dim](engine: {escape(row['engine_reason'])})[/]"
        runtime.add_row(row["engine"], row["module"], "yes" if row["quantized"] else "no", rule)
    show(runtime)
    target = data["target_layers"]
    out.print(f"target layers: {target['count'] if target['count'] is not None else 'L'} ({escape(target['source'])})")
    out.print(f"exclude rules written: {escape(str(data['exclude']))}")
    src_b, out_b = data["source_bytes"], data["estimated_output_bytes"]
    assert isinstance(src_b, int) and isinstance(out_b, int)
    out.print(f"size: {human_bytes(src_b)} → ~{human_bytes(out_b)} ({out_b / max(src_b, 1):.2f}×)")


def register(app: typer.Typer) -> None:
    app.command("inspect", cls=Command)(inspect_command)
