"""``eaglequant search SRC DST --inputs CAPTURED --max-acceptance-drop D``: the smallest draft within a budget."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import (
    MAX_VOCABULARY,
    EngineOpt,
    MaxDraftTokensOpt,
    MeasuredOpt,
    PredictDeviceOpt,
    TensorParallelOpt,
)
from eaglequant.cli.output import info, note, out, result
from eaglequant.cli.tables import acceptance_table, name_column, show, speedup_table
from eaglequant.common.draft_tokens import DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.errors import EXIT_CHECK_FAILED
from eaglequant.conversion.options import DEFAULT_ENGINES, MAX_TARGET_LAYERS

if TYPE_CHECKING:
    from eaglequant.search.fastest import FastestPick
    from eaglequant.search.smallest import SearchResult


def search_command(
    src: Annotated[Path, typer.Argument(help="The BF16 draft head (a directory).", show_default=False)],
    dst: Annotated[Path, typer.Argument(help="Where the chosen draft goes (a new directory).", show_default=False)],
    inputs: Annotated[
        Path,
        typer.Option(
            "--inputs",
            help="Captured inputs with the target's choices (`eaglequant capture`), on which every candidate's "
            "greedy acceptance is replayed against SRC's.",
            show_default=False,
        ),
    ],
    max_acceptance_drop: Annotated[
        str,
        typer.Option(
            "--max-acceptance-drop",
            help="The budget: tokens of greedy acceptance length (0.05), or a share of SRC's accepted tokens (5%).",
            show_default=False,
        ),
    ],
    rule: Annotated[
        str,
        typer.Option(
            "--rule",
            help="'bound': the drop's 95% upper bound must be within the budget (many candidates are tried, and "
            "the luckiest estimate would win); 'point': its estimate, as verify's gate.",
        ),
    ] = "bound",
    counts: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--counts",
            help="Token counts (captured inputs or a token-count file, as for prune): the search then also prunes "
            "the vocabulary. Best counted on other text than --inputs.",
            show_default=False,
        ),
    ] = None,
    vocab_size: Annotated[
        Optional[list[int]],  # noqa: UP045
        typer.Option(
            "--vocab-size",
            min=1,
            max=MAX_VOCABULARY,
            help="A pruned vocabulary size to try (repeatable; default with --counts: a half, a quarter and an "
            "eighth of the draft's).",
            show_default=False,
        ),
    ] = None,
    scheme: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--scheme", help="A built-in scheme to try (repeatable; default: all).", show_default=False),
    ] = None,
    engine: EngineOpt = None,
    target_layers: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--target-layers",
            min=1,
            max=MAX_TARGET_LAYERS,
            help="The target model's layer count (vLLM numbers the draft's layers after it). Without it, the "
            "candidates with lm_head in a scheme of its own (a per-module config) are skipped: their "
            "per-module entries name modules after the target's layers; the output says how many.",
            show_default=False,
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace DST if eaglequant wrote it.")] = False,
    max_draft_tokens: MaxDraftTokensOpt = DEFAULT_MAX_DRAFT_TOKENS,
    device: PredictDeviceOpt = "cpu",
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential/--no-sequential",
            help="Stop predicting a candidate at the first planned look (2, 4, 8, ... sequences) whose wider "
            "interval settles its verdict (any early stop wrong with probability at most 5%); the last look is the "
            "one gate. With --rule point every sequence is predicted.",
        ),
    ] = True,
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="'bytes': the smallest draft within the budget; 'speedup': every candidate predicted, and the "
            "candidate and k (num_speculative_tokens) with the highest predicted decode speed-up over the target "
            "alone, within the budget at that k (docs/speedup.md).",
        ),
    ] = "bytes",
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--target",
            help="With --objective speedup: the target's checkpoint directory or config.json, whose forwards the "
            "model prices (default: the target the --inputs capture records, where it is a local directory).",
            show_default=False,
        ),
    ] = None,
    tensor_parallel_size: TensorParallelOpt = None,
    measured: MeasuredOpt = None,
    concurrency: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--concurrency",
            help="With --objective speedup: the loads served at (sequences decoded together), each given its own k, "
            "0 where no k's predicted speed-up beats the target alone: '1,2,4,8', '1-64' (the powers of two), or "
            "weighted, '4:0.5,16:0.5' (default: equal weights). The draft picked is the fastest over them as "
            "weighted; the card serves the ks as vLLM's num_speculative_tokens_per_batch_size (default: 1).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write the smallest draft within an acceptance budget (the fewest weight bytes a speculative round reads), or
    with --objective speedup the fastest one and its k.

    Tries each built-in scheme in each format the engines load, with lm_head kept or quantized (where the engines
    run it quantized) and, with --counts, the vocabulary pruned; from the smallest up, each is converted and its
    acceptance predicted, and the first within the budget is written. Exits 3 when none is, and with --objective
    speedup when no candidate's predicted speed-up beats the target alone at any load (do not speculate).
    """

    def body() -> bool:
        from eaglequant.search.smallest import search

        found = search(
            src,
            dst,
            inputs=inputs,
            max_acceptance_drop=max_acceptance_drop,
            rule=rule,
            counts=counts,
            vocab_sizes=vocab_size or (),
            schemes=scheme or (),
            engines=engine or DEFAULT_ENGINES,
            target_layers=target_layers,
            overwrite=overwrite,
            progress=_progress_line,
            max_draft_tokens=max_draft_tokens,
            device=device,
            sequential=sequential,
            objective=objective,
            target=target,
            tensor_parallel_size=tensor_parallel_size or 1,
            measured=measured,
            concurrency=concurrency,
        )
        result(found.record().to_json(), lambda: render(found))
        return found.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_CHECK_FAILED)


def _progress_line(text: str) -> None:
    """One timestamped line on stderr, as the phases of the other long commands log (none with --quiet)."""
    info(f"[dim]{time.strftime('%H:%M:%S')} {escape(text)}[/]", markup=True)


def _not_within(found: SearchResult, prediction: Any) -> str:
    """A candidate not within the budget: past it, or inconclusive (its interval straddles it)."""
    return "[yellow]inconclusive[/]" if found.budget.inconclusive(prediction, found.budget_tokens) else "no"


def render(found: SearchResult) -> None:
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, judged_at_text
    from eaglequant.common.sizes import decimal_bytes

    table = Table(title="candidates, smallest first (bytes a round reads, the largest over the engines)")
    name_column(table, "candidate")
    headers = ("bytes / round", "fewer than SRC", "sequences", "predicted change [95%]: the bound that decided")
    for header in (*headers, "within"):
        table.add_column(header, justify="right" if header != "within" else "left", no_wrap=header != "within")
    for point in found.points:
        if point.prediction is None:
            continue
        table.add_row(
            escape(point.candidate.label),
            decimal_bytes(point.bytes_per_round),
            f"{found.source_bytes_per_round / max(point.bytes_per_round, 1):.2f}×",
            str(point.prediction.sequences),
            escape(found.budget.judged_text(point.prediction, found.budget_tokens)),
            "[green]yes[/]" if point.within else _not_within(found, point.prediction),
        )
    show(table)
    judged = "" if found.objective != "bytes" else f"; {judged_at_text(DEFAULT_DRAFT_TOKENS, DEFAULT_DRAFT_TOKENS)}"
    out.print(
        f"source: greedy acceptance length {found.source_length:.3f}, {decimal_bytes(found.source_bytes_per_round)} "
        f"a round; budget: {escape(found.budget.text(found.budget_tokens))}{judged}",
        soft_wrap=True,
    )
    out.print(f"engines targeted: {escape(_titled(found.engines))}", soft_wrap=True)
    out.print(f"{escape(found.stopped)} ({found.seconds:.0f} s)", soft_wrap=True)
    if found.sequential is not None:
        positions = found.positions_predicted
        out.print(f"{escape(found.sequential.text)}; {positions} draft positions predicted", soft_wrap=True)
    for text in found.notes:
        note(text)
    if found.chosen is None:
        _render_none(found)
        return
    where = f" (from the pruned head {found.pruned_source})" if found.pruned_source else ""
    out.print(
        f"[green]wrote[/] {escape(str(found.destination))}: {escape(found.chosen.candidate.label)}{escape(where)}",
        soft_wrap=True,
    )
    out.print(f"  loaded by: {escape(', '.join(found.loaded_by) or 'no engine eaglequant knows')}", soft_wrap=True)
    show(acceptance_table(found.chosen.prediction.by_draft_tokens))
    if found.pick is not None:
        _render_pick(found.pick)


def _render_none(found: SearchResult) -> None:
    """Nothing written: none within the budget, or (the speedup objective) none that beats the target alone."""
    if found.pick is None:
        out.print("[bold red]none within the budget[/]: the BF16 source is the smallest draft that meets it")
        return
    where = "this load" if len(found.pick.loads.concurrency) == 1 else "any of these loads"
    out.print(
        f"[bold red]do not speculate at {where}[/]: no candidate within the budget is predicted to beat the target "
        f"alone ({escape(found.pick.loads.text)}); nothing written",
        soft_wrap=True,
    )
    _render_pick(found.pick)


def _render_pick(pick: FastestPick) -> None:
    for table, choice in zip(pick.tables, pick.plan.choices, strict=True):
        at = f" at concurrency {table.concurrency}" if len(pick.tables) > 1 else ""
        show(speedup_table(table, f"predicted speed-up over the target alone{at}"))
        if choice.point is None:
            out.print(f"  no k beats the target alone{at}: k = 0, do not speculate at this load", soft_wrap=True)
    if pick.schedule:
        out.print(f"vLLM schedule: num_speculative_tokens_per_batch_size {_schedule_json(pick)}", soft_wrap=True)
    for line in pick.table.assumptions:
        note(line)


def _schedule_json(pick: FastestPick) -> str:
    import json

    return json.dumps([list(entry) for entry in pick.schedule])


def _titled(engines: tuple[str, ...]) -> str:
    from eaglequant.engines import engine_title

    return ", ".join(engine_title(name) for name in engines)


def register(app: typer.Typer) -> None:
    app.command("search", cls=Command)(search_command)
