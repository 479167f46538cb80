"""``eaglequant explain DST``: how each engine will read a quantized checkpoint. Headers only."""

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
    MAX_PARALLEL,
    DraftTokensOpt,
    MeasuredOpt,
    QuantizedDstArg,
    TargetConfigOpt,
    TargetLayersOpt,
    TensorParallelOpt,
)
from eaglequant.cli.output import absolute, note, out, result
from eaglequant.cli.tables import name_column, show, show_round_costs, speedup_grid, speedup_table, speedup_terms
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.errors import EXIT_CHECK_FAILED, InputError

if TYPE_CHECKING:
    from eaglequant.api.speedup import Serving
    from eaglequant.readback.explanation import EngineReading, Explanation, ModuleReading
    from eaglequant.speedup.model import SpeedupTable


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
    acceptance: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--acceptance",
            help="With --target-config: an acceptance length at a k (2.62@3), carried to k = 1..8 at a constant "
            "per-token rate, for the speed-up table (default: what the search that chose DST predicted).",
            show_default=False,
        ),
    ] = None,
    tensor_parallel_size: TensorParallelOpt = None,
    measured: MeasuredOpt = None,
    gpu: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--gpu",
            help="With --target-config: the accelerator each rank is (h100, h200, b200, mi300x, "
            "mi355x; default h100), its bandwidth and dense peaks as its vendor states them.",
            show_default=False,
        ),
    ] = None,
    bandwidth: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            "--bandwidth",
            min=0.01,
            max=100.0,
            help="With --target-config: a rank's HBM bandwidth in TB/s, your own figure (over --gpu's).",
            show_default=False,
        ),
    ] = None,
    peak: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--peak",
            help="With --target-config: a rank's dense peak for a kind, KIND=TFLOPS (bf16, fp8, "
            "int8, fp4), your own figure (over --gpu's); repeat for each kind.",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        str,
        typer.Option(
            "--concurrency",
            help="With --target-config: the sequences decoding at once, one or a list "
            "(4,8,16,32,64): a speed-up table for each.",
        ),
    ] = "1",
    routing_locality: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--routing-locality",
            help="With --target-config: the chance a sequence's next token routes to the experts its last did, 0 to "
            "1 (0: every token independently, the bound; default 0.5), 'fit' to fit it to --measured (three k or "
            "more), or a capture file (eaglequant capture OUT) that measured it from the target's router.",
            show_default=False,
        ),
    ] = None,
    expert_parallel_size: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--expert-parallel-size",
            min=1,
            max=MAX_PARALLEL,
            help="With --target-config: ranks the routed experts are placed on whole (expert parallelism; in vLLM "
            "the tensor-parallel size).",
            show_default=False,
        ),
    ] = None,
    draft_tensor_parallel_size: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--draft-tp",
            min=1,
            max=MAX_PARALLEL,
            help="With --target-config: ranks the draft runs on (the speculative config's draft tensor parallel "
            "size; default the target's).",
            show_default=False,
        ),
    ] = None,
    fit_at: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--fit-at",
            min=1,
            max=4096,
            help="With --measured from accept --concurrency: the concurrency whose source-draft rounds fit the "
            "round's terms (default: the smallest measured); every other C is then predicted.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show how each engine reads DST: runtime modules, rules, schemes, expected tensors, and the weight bytes it
    reads per speculative round; with --target-config, the predicted decode speed-up at each k.

    Exits 3 when an engine would not load DST as its config says.
    """

    def body() -> bool:
        from eaglequant.api import explain
        from eaglequant.api.speedup import as_trained

        serving = _serving(target_config, tensor_parallel_size, gpu, bandwidth, peak or [], concurrency,
                           routing_locality, expert_parallel_size, draft_tensor_parallel_size, fit_at)  # fmt: skip
        if target_config is not None and as_trained(dst):  # a BF16 draft: its speed-up as it is, the baseline
            tables = _speedup_tables(dst, target_config, acceptance, serving, measured, engine or [])
            result({"destination": str(dst.absolute()), "speedup": [t.to_json() for t in tables or []]},
                   lambda: _render_speedup(tables))  # fmt: skip
            return True
        explanation = explain(
            dst,
            engines=engine or [],
            target_layers=target_layers,
            target_config=target_config,
            draft_tokens=draft_tokens,
        )
        destination = absolute(explanation.destination)
        shown = replace(explanation, destination=explanation.destination.absolute())
        tables = _speedup_tables(dst, target_config, acceptance, serving, measured, engine or [])
        written = shown.to_json() if tables is None else {**shown.to_json(), "speedup": [t.to_json() for t in tables]}

        def rendered() -> None:
            render(explanation, str(destination))
            _render_speedup(tables)

        result(written, rendered)
        return explanation.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_CHECK_FAILED)


def _serving(
    target: Path | None,
    tensor_parallel_size: int | None,
    gpu: str | None,
    bandwidth: float | None,
    peaks: list[str],
    concurrency: str,
    routing_locality: str | None,
    expert_parallel_size: int | None,
    draft_tensor_parallel_size: int | None,
    fit_at: int | None = None,
) -> Serving | None:
    """The serving the speed-up tables price (None: no target); a speed-up flag without a target is refused."""
    given = {"--gpu": gpu, "--bandwidth": bandwidth, "--peak": peaks or None,
             "--concurrency": None if concurrency == "1" else concurrency, "--routing-locality": routing_locality,
             "--expert-parallel-size": expert_parallel_size,
             "--draft-tp": draft_tensor_parallel_size, "--fit-at": fit_at}  # fmt: skip
    if target is None:
        named = [flag for flag, value in given.items() if value is not None]
        if named:
            raise InputError(
                f"{named[0]} prices the target's forwards, and no target is given",
                hint="give the target's checkpoint directory or config.json: --target-config PATH",
            )
        return None
    from eaglequant.api.speedup import Serving
    from eaglequant.speedup.hardware import parse_peaks
    from eaglequant.speedup.locality import given_locality

    tp = tensor_parallel_size or 1
    rho, fit, measured = given_locality(routing_locality)
    return Serving(tp, _concurrencies(concurrency), gpu, bandwidth, parse_peaks(peaks), rho, expert_parallel_size or 1,
                   draft_tensor_parallel_size, fit, routing_measured=measured, fit_concurrency=fit_at)  # fmt: skip


def _concurrencies(text: str) -> tuple[int, ...]:
    try:
        found = tuple(int(part) for part in text.split(","))
    except ValueError:
        found = ()
    if not found or min(found) < 1:
        raise InputError(f"--concurrency {text!r}: not a list of sequence counts, each at least 1",
                         hint="e.g. --concurrency 4,8,16,32,64")  # fmt: skip
    return tuple(sorted(set(found)))


def _speedup_tables(
    dst: Path,
    target: Path | None,
    acceptance: str | None,
    serving: Serving | None,
    measured: Path | None,
    engines: list[str],
) -> list[SpeedupTable] | None:
    """The speed-up tables of each engine that loads DST and of its BF16 source, at each concurrency, where a
    target is given (None: no target, or no acceptance to predict from: said in a note)."""
    if target is None or serving is None:
        if acceptance is not None or measured is not None:
            raise InputError(
                "--acceptance and --measured price the target's forwards, and no target is given",
                hint="give the target's checkpoint directory or config.json: --target-config PATH",
            )
        return None
    from eaglequant.api.speedup import acceptance_at, predicted_speedup
    from eaglequant.record.search import read_search, recorded_acceptance

    if acceptance is not None:
        lengths, said = acceptance_at(acceptance)
    else:
        lengths, said = recorded_acceptance(read_search(dst)) or {}, "predicted by the search that chose it"
    if not lengths:
        if measured is not None:
            raise InputError(
                "--measured fits the speed-up table's terms, and there is no table: DST records no predicted "
                "acceptance", hint="give one: --acceptance 2.62@3",
            )  # fmt: skip
        note("no speed-up table: DST records no predicted acceptance; give one with --acceptance 2.62@3")
        return None
    return predicted_speedup(dst, target, acceptance=lengths, acceptance_from=said, measured=measured,
                             engines=engines, serving=serving)  # fmt: skip


def _render_speedup(tables: list[SpeedupTable] | None) -> None:
    if not tables:
        return
    if all(t.concurrency == 1 for t in tables):
        for table in tables:
            show(speedup_table(table, "predicted decode speed-up over the target alone"))
    else:
        for name in dict.fromkeys(t.draft for t in tables):
            show(speedup_grid([t for t in tables if t.draft == name]))
        show(speedup_terms([t for t in tables if t.draft == tables[0].draft]))
    for line in tables[0].assumptions:
        note(line)


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
