"""``eaglequant explain DST``: how each engine will read a quantized checkpoint. Headers only."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import (
    DraftTokensOpt,
    QuantizedDstArg,
    TargetConfigOpt,
    TargetLayersOpt,
)
from eaglequant.cli.output import absolute, note, out, result
from eaglequant.cli.tables import name_column, show, show_round_costs
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.errors import EXIT_CHECK_FAILED

if TYPE_CHECKING:
    from eaglequant.readback.explanation import EngineReading, Explanation, ModuleReading


def explain_command(
    dst: QuantizedDstArg,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            "--engine",
            "-e",
            help="Engines to explain, each of which must load DST (default: those DST was made for). 'all' (and the "
            "default for a checkpoint another tool wrote): every engine, each that can load DST's scheme and format "
            "checked, the others listed as not loading it, which is no problem.",
        ),
    ] = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
    draft_tokens: DraftTokensOpt = DEFAULT_DRAFT_TOKENS,
) -> None:
    """Show how each engine reads DST: runtime modules, rules, schemes, expected tensors, and the weight bytes it
    reads per speculative round.

    Exits 3 when an engine would not load DST as its config says.
    """

    def body() -> bool:
        from eaglequant.api import explain

        explanation = explain(
            dst,
            engines=engine or [],
            target_layers=target_layers,
            target_config=target_config,
            draft_tokens=draft_tokens,
        )
        destination = absolute(explanation.destination)
        shown = replace(explanation, destination=explanation.destination.absolute())
        result(shown.to_json(), lambda: render(explanation, str(destination)))
        return explanation.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_CHECK_FAILED)


def render(explanation: Explanation, destination: str) -> None:
    target = explanation.target
    out.print(f"[bold]{escape(destination)}[/]: {explanation.format}, {escape(explanation.scheme)}", markup=True)
    out.print(f"  exclude rules: {escape(str(list(explanation.patterns)))}")
    out.print(f"  target layers: {target.count if target.count is not None else 'L'} ({escape(target.source)})")
    for reading in explanation.engines:
        if reading.loads:
            _render_engine(reading)
        else:
            out.print(
                f"[dim]{reading.titled} does not load this checkpoint: {escape(reading.note)}[/]",
                soft_wrap=True,
            )
    from eaglequant.record.search import read_search, searched_baseline

    baseline = searched_baseline(read_search(explanation.destination))
    show_round_costs([r.round_cost for r in explanation.engines if r.round_cost is not None], baseline)
    listed = [r.titled for r in explanation.engines if not r.judged]
    if explanation.ok:
        if not listed:
            out.print("[green]ok[/]: each engine above applies exactly what this checkpoint stores", markup=True)
            return
        loading = ", ".join(r.titled for r in explanation.engines if r.loads) or "none"
        out.print(
            f"[green]ok[/] for the engines that load it ({escape(loading)}): each applies exactly what this "
            f"checkpoint stores; {escape(', '.join(listed))} cannot load it (listed only: name an engine with "
            "--engine to require it)",
            markup=True,
            soft_wrap=True,
        )
        return
    for problem in explanation.all_problems:
        out.print(f"[bold red]problem[/]: {escape(str(problem))}", markup=True, soft_wrap=True)


def _render_engine(reading: EngineReading) -> None:
    table = Table(title=reading.titled, title_justify="left")
    name_column(table, "runtime module")
    table.add_column("rule", overflow="fold")
    table.add_column("scheme")
    name_column(table, "checkpoint module")
    table.add_column("tensors it expects")
    engine_kept = []
    for module in reading.modules:
        scheme = module.scheme
        if scheme is None:
            scheme = "[yellow]none[/]"
            if module.engine_reason:
                engine_kept.append((module.runtime_name, module.engine_reason))
                scheme += f" ({len(engine_kept)})"
        first = (escape(module.runtime_name), escape(module.rule or ""), scheme)
        for index, member in enumerate(module.members):
            table.add_row(*(first if index == 0 else ("", "", "")), escape(member), _expected(module, member))
    show(table)
    for number, (name, why) in enumerate(engine_kept, start=1):
        out.print(f"  ({number}) {escape(name)}: {escape(why)}")
    for text in reading.notes:
        note(text)


def _expected(module: ModuleReading, member: str) -> str:
    """The tensors ``module`` expects of its checkpoint module ``member``, one a line, named within it."""
    prefix = member + "."
    return "\n".join(
        f"{escape(t.name.removeprefix(prefix))} {t.dtype} {list(t.shape)}"
        + ("" if t.found == "ok" else f" [red]found {escape(t.found)}[/]")
        for t in module.expects
        if t.name.startswith(prefix)
    )


def register(app: typer.Typer) -> None:
    app.command("explain", cls=Command)(explain_command)
