"""``eaglequant accept DST... --target T``: acceptance length before and after, with the engine's own decoding."""

from __future__ import annotations

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
    MAX_TEMPERATURE,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    EngineArgOpt,
    EnginePythonOpt,
    MaxPromptsOpt,
    PromptsOpt,
    TensorParallelOpt,
    positive,
    positive_number,
)
from eaglequant.cli.output import info, note, out, result
from eaglequant.cli.tables import show
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS

if TYPE_CHECKING:
    from eaglequant.measurement.measure import AcceptanceReport, AtConcurrency, AtDraftTokens, DraftResult, Mode
    from eaglequant.measurement.one_server import ServerAcceptance


def accept_command(
    dst: Annotated[
        Optional[list[Path]],  # noqa: UP045
        typer.Argument(
            help="Quantized drafts (directories `convert` wrote); none with one --server: that server alone.",
            show_default=False,
        ),
    ] = None,
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--target",
            help="The target model's directory (what the engine serves); with --server, read from the servers.",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--source",
            help="The BF16 draft DST was made from (default: the one its report records).",
            show_default=False,
        ),
    ] = None,
    prompts: PromptsOpt = None,
    max_prompts: MaxPromptsOpt = None,
    draft_tokens: Annotated[
        str,
        typer.Option(
            "--draft-tokens",
            help="k, the tokens drafted per speculative round (vLLM's num_speculative_tokens); several separated by "
            "commas (1,2,3,4): each draft is measured at each, the budget judged at the first.",
            metavar="K[,K...]",
        ),
    ] = str(DEFAULT_DRAFT_TOKENS),
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, max=MAX_GENERATED_TOKENS, help="Tokens generated per prompt.")
    ] = 96,
    temperature: Annotated[
        Optional[list[float]],  # noqa: UP045
        typer.Option(
            "--temperature",
            min=0,
            max=MAX_TEMPERATURE,
            callback=positive,
            help="A sampled mode beside greedy, at this temperature (repeatable; default: greedy only).",
            show_default=False,
        ),
    ] = None,
    served_as: Annotated[
        str,
        typer.Option(
            "--served-as",
            help="'dequantized': the quantized weights dequantized (the weight-only "
            "effect; on CPU vLLM has no FP4 kernel); 'stored': DST as written (a GPU with the kernels).",
        ),
    ] = "dequantized",
    dtype: Annotated[str, typer.Option("--dtype", help="Serving dtype: bfloat16, float16 or float32.")] = "bfloat16",
    engine_python: EnginePythonOpt = None,
    tensor_parallel_size: TensorParallelOpt = None,
    engine_arg: EngineArgOpt = None,
    server: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--server",
            help="A running vLLM server's URL: the source draft's first, then one per DST in order (repeatable); "
            "needs --reference-server. Once with no DST: that server's own acceptance length.",
            show_default=False,
        ),
    ] = None,
    reference_server: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--reference-server",
            help="With --server: a server of the same target without a draft (the greedy reference).",
            show_default=False,
        ),
    ] = None,
    launch: Annotated[
        bool,
        typer.Option(
            "--launch", help="Start vLLM's OpenAI-compatible server for each run (127.0.0.1) and measure it there."
        ),
    ] = False,
    port: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--port",
            min=1,
            max=65535,
            help="With --launch: the port the servers listen on (checked free first).",
            show_default=False,
        ),
    ] = None,
    window: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            "--window",
            min=MIN_WINDOW_S,  # a closed range click states as it checks it (0 would show as allowed)
            max=MAX_WINDOW_S,
            callback=positive_number,
            help="With one --server and no DST: send nothing, read its counters over SECONDS of its live traffic.",
            show_default=False,
            metavar="SECONDS",
        ),
    ] = None,
    concurrency: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--concurrency",
            help="Also send the prompts with at most C requests in flight, greedy, in every run (as vllm bench "
            "serve --max-concurrency): output tokens/s and the speed-up at each C (1,2,4,8).",
            metavar="C[,C...]",
            show_default=False,
        ),
    ] = None,
    schedule: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--schedule",
            help="With --concurrency, offline: each draft served once more with a k for each batch size, as vLLM's "
            "num_speculative_tokens_per_batch_size (1-2:3,3-8:1: k = 3 for 1 or 2 requests, 1 from 3 to 8), "
            "measured at each C beside the fixed k; 'searched': the one the DSTs' search recorded.",
            metavar="START-END:K[,...]|searched",
            show_default=False,
        ),
    ] = None,
    target_alone_runs: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--target-alone-runs",
            min=1,
            max=10,
            help="How often the target alone is served: before the drafts, then after them; a decode rate that "
            "moves more than 15% between them refuses every speed-up of the run (1: drift not checked; default 2).",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed of the sampled modes.")] = 0,
    no_record: Annotated[
        bool, typer.Option("--no-record", help="Do not write eaglequant_accept.json and the card's figures into DST.")
    ] = False,
) -> None:
    """Measure acceptance length with vLLM's own EAGLE-3 speculative decoding: the source draft and each DST.

    Runs the target alone (the greedy reference), then with the source draft and with each DST, greedy and
    sampled, at each --draft-tokens k: offline by default, on vLLM servers it starts (--launch), or on running
    ones (--server). Reports acceptance length and per-position rates with 95% intervals over prompts, the
    difference from the source, whether greedy output equals the target's alone, and decode tokens per second
    with the speed-up over the target alone (and at each --concurrency C). The target alone runs before the drafts
    and after them. The budget is judged at the k the DST is served at (its search's, else 3) where measured,
    else at the first --draft-tokens. Exits 3 when a draft's greedy output differs from the target's, a DST's
    loss is wholly past its budget, or a figure breaks a physical limit: a speed-up above the acceptance length or
    wider than 2x, or the target alone's rate moving more than 15% between its runs (no speed-up is then given);
    exits 7 when that is all clear but a loss straddles its budget (more prompts would tell).
    With one --server and no DST: that server's acceptance length on the prompts, or over --window SECONDS of its
    live traffic.
    Per-prompt progress (offline: per run) and an ETA go to stderr; -q turns them off.
    """

    def body() -> int:
        from eaglequant.api.acceptance import accept, accept_server
        from eaglequant.cli.progress_display import steps_display

        if not dst and len(server or []) == 1:
            _one_server_takes_neither(concurrency, target_alone_runs, schedule)
            alone = accept_server(
                (server or [])[0],
                window_s=window,
                prompts=prompts,
                max_prompts=max_prompts,
                draft_tokens=draft_tokens,
                max_tokens=max_tokens,
                temperatures=temperature or [],
                seed=seed,
                steps=steps_display(),
                reference_server=reference_server,
            )
            result(alone.to_json(), lambda: render_server(alone))
            return 0
        report = accept(
            dst or [],
            target=target,
            source=source,
            prompts=prompts,
            max_prompts=max_prompts,
            draft_tokens=draft_tokens,
            max_tokens=max_tokens,
            temperatures=temperature or [],
            served_as=served_as,
            dtype=dtype,
            engine_python=engine_python,
            tensor_parallel_size=tensor_parallel_size,
            engine_args=engine_arg or [],
            server=server or [],
            reference_server=reference_server,
            launch=launch,
            port=port,
            window_s=window,
            target_alone_runs=2 if target_alone_runs is None else target_alone_runs,
            concurrency=concurrency or (),
            schedule=schedule,
            seed=seed,
            record=not no_record,
            progress=lambda what: info(f"serving {what}"),
            steps=steps_display(),
        )
        result(report.record().to_json(), lambda: render(report))
        return report.exit_code

    code = run_guarded(body)
    if code:
        raise typer.Exit(code)


def _one_server_takes_neither(concurrency: str | None, target_alone_runs: int | None, schedule: str | None) -> None:
    """One server on its own has no target alone to compare with: the speed-up options are refused, not dropped."""
    from eaglequant.common.errors import InputError

    given = (("--concurrency", concurrency), ("--target-alone-runs", target_alone_runs), ("--schedule", schedule))
    for flag, value in given:
        if value is not None:
            raise InputError(
                f"{flag} measures speed-ups over the target alone: one --server with no DST has none",
                hint="give the DSTs, a --server for each and --reference-server for the target alone, or leave it out",
            )


def render_server(report: ServerAcceptance) -> None:
    """One server's acceptance: over the prompts, a row per mode with intervals and its decode rate; over a
    window, its counts."""
    from eaglequant.engines import engine_title

    title = f"[bold]{engine_title('vllm', report.version)}[/] at {escape(report.server)} ({escape(report.model)})"
    window, settings = report.window, report.settings
    if window is not None:
        out.print(f"{title}, k = {report.draft_tokens}: {window.seconds:g} s of live traffic", markup=True)
        per_position = " / ".join(f"{rate:.2f}" for rate in window.per_position)
        out.print(
            f"acceptance length {window.acceptance_length:.3f} over {window.drafts} drafts "
            f"({window.accepted} of {window.draft_tokens} draft tokens accepted); per position {per_position}",
            soft_wrap=True,
        )
    elif settings is not None:
        out.print(
            f"{title}, k = {report.draft_tokens}: {settings.prompts} prompts ({escape(settings.prompts_from)}) "
            f"× {settings.max_tokens} tokens",
            markup=True,
        )
        table = Table(title="acceptance length (95% interval over prompts)", title_justify="left")
        clock = f"decode tok/s ({report.clock} clock)" if report.clock else "decode tok/s"
        for column in ("mode", "acceptance length", "per position", "drafts", clock):
            table.add_column(column, justify="left" if column == "mode" else "right", overflow="fold")
        for name, mode in report.modes.items():
            acceptance, rate = mode.acceptance, mode.decode_tokens_per_second
            per_position = " / ".join(p.value_text() for p in acceptance.per_position)
            speed = "n/a" if rate is None else f"{rate:.1f}"
            table.add_row(name, acceptance.acceptance_length.text(), per_position, str(acceptance.drafts), speed)
        show(table)
    for text in report.notes:
        note(text)


def render(report: AcceptanceReport) -> None:
    from eaglequant.common.draft_tokens import schedule_text
    from eaglequant.measurement.measure import GREEDY
    from eaglequant.measurement.statistics import change_text

    settings = report.settings
    scheduled = f" and the schedule {schedule_text(settings.schedule)} (k by requests in flight)" * bool(
        settings.schedule
    )
    out.print(
        f"[bold]{escape(report.engine_build)}[/], k = {settings.draft_tokens}{scheduled}: "
        f"{len(settings.prompts)} prompts ({escape(settings.prompts_from)}) × {settings.max_tokens} tokens",
        markup=True,
    )
    table = Table(title="acceptance length (95% interval over prompts)", title_justify="left")
    for column in ("draft", "mode", "acceptance length", "per position", "change vs source", "greedy = target"):
        table.add_column(column, justify="left" if column in ("draft", "mode") else "right", overflow="fold")
    for draft in (report.source, *report.quantized):
        _add_draft_rows(table, draft, settings.modes)
    show(table)
    _show_speeds(report)
    _show_concurrency(report)
    for draft in report.quantized:
        diff, verdict = draft.reported_difference(GREEDY.name), draft.verdict_text()
        if verdict is not None and diff is not None and diff.reported_value is not None:
            info(f"{escape(draft.label)}: greedy change {escape(change_text(diff))}; {escape(verdict)}")
    for text in report.notes:
        note(text)
    if report.ok:
        out.print("[green]ok[/]: every draft lossless, every quantized draft within its budget", markup=True)
    for problem in report.problems:
        inconclusive = problem.code == "acceptance-inconclusive"
        label = "[yellow]inconclusive[/]" if inconclusive else "[bold red]problem[/]"
        out.print(f"{label}: {escape(str(problem))}", markup=True, soft_wrap=True)


CLOCKS = {"engine": "the engine's own clock", "wall": "the client's wall time around each request"}


def _show_speeds(report: AcceptanceReport) -> None:
    """Per draft and k, greedy: acceptance length, decode tokens per second and the speed-up over the target
    alone with its interval; the target alone's own rate and its clock in the title."""
    from eaglequant.measurement.measure import GREEDY

    alone = report.alone
    rate = None if alone is None else alone.decode_tokens_per_second()
    if alone is None or rate is None:
        return
    clock = CLOCKS.get(alone.clock or "", "an unknown clock")
    rates = [run.decode_tokens_per_second() for run in (alone, *report.alone_again)]
    runs = " then ".join("n/a" if r is None else f"{r:.1f}" for r in rates)
    title = f"decode speed, greedy ({report.engine_build}; the target alone {runs} tok/s, by {clock})"
    table = Table(title=escape(title), title_justify="left")
    for column in ("draft", "k", "acceptance length", "tok/s", "speed-up (95% interval)", "greedy = target"):
        table.add_column(column, justify="left" if column == "draft" else "right", overflow="fold")
    for draft in (report.source, *report.quantized):
        for index, at in enumerate(_served(draft)):
            drafted = at.run.decode_tokens_per_second()
            same = f"{at.lossless.equal + at.lossless.near_ties}/{at.lossless.prompts}"
            table.add_row(
                escape(draft.label) if index == 0 else "",
                _k_text(at),
                at.run.acceptance(GREEDY.name).length().text(),
                "n/a" if drafted is None else f"{drafted:.1f}",
                _speedup_text(at),
                same if at.lossless.ok else f"[red]{same}[/]",
            )
    show(table)


def _show_concurrency(report: AcceptanceReport) -> None:
    """Per C, the target alone's output tokens per second, then each draft's at each k and its speed-up."""
    from eaglequant.measurement.measure import alone_record

    if report.alone is None or not report.alone.concurrent:
        return
    by_c = alone_record([report.alone, *report.alone_again]).by_concurrency
    title = f"output tokens/s with at most C requests in flight, greedy ({report.engine_build}; wall time of each pass)"
    table = Table(title=escape(title), title_justify="left")
    for column in ("draft", "k", "C", "acceptance length", "output tok/s (95% interval)", "speed-up (95% interval)"):
        table.add_column(column, justify="left" if column == "draft" else "right", overflow="fold")
    for index, at_c in enumerate(by_c):
        runs = " then ".join("n/a" if r is None else f"{r:.1f}" for r in at_c.runs)
        shown = at_c.output_tokens_per_second.text()
        table.add_row("target alone" if index == 0 else "", "", str(at_c.concurrency), "", f"{shown} ({runs})", "")
    for draft in (report.source, *report.quantized):
        for at in _served(draft):
            for index, c in enumerate(at.at_concurrency):
                length = c.drafted.acceptance_length()
                table.add_row(
                    escape(draft.label) if index == 0 and at is draft.by_draft_tokens[0] else "",
                    _k_text(at) if index == 0 else "",
                    str(c.concurrency),
                    "n/a" if length is None else f"{length:.3f}",
                    c.drafted.output_tokens_per_second().text(),
                    _speedup_text(c),
                )
    show(table)


def _served(draft: DraftResult) -> list[AtDraftTokens]:
    """Each k the draft was served at, then the schedule where it was served with one."""
    return [*draft.by_draft_tokens, *([draft.scheduled] if draft.scheduled is not None else [])]


def _k_text(at: AtDraftTokens) -> str:
    """The k, or the schedule as --schedule takes it (k by batch size)."""
    from eaglequant.common.draft_tokens import schedule_text

    return schedule_text(at.schedule) if at.schedule else str(at.draft_tokens)


def _speedup_text(at: AtDraftTokens | AtConcurrency) -> str:
    """The speed-up with its interval, or what refused it (the problem lines below say why)."""
    reported = at.reported_speedup
    if reported is None:
        return f"[red]none: {', '.join(at.speed_problems)}[/]"
    return reported.text()


def _add_draft_rows(table: Table, draft: DraftResult, modes: tuple[Mode, ...]) -> None:
    """One row per mode; the draft's name and whether its greedy output was the target's on the first."""
    name = "source" if draft.served_as == "source" else f"{draft.label} ({draft.served_as})"
    lossless = draft.lossless
    same = f"{lossless.equal}/{lossless.prompts}" + (f" (+{lossless.near_ties} tie)" if lossless.near_ties else "")
    for index, mode in enumerate(modes):
        acceptance = draft.run.acceptance(mode.name)
        diff = draft.reported_difference(mode.name)
        table.add_row(
            escape(name) if index == 0 else "",
            mode.name,
            acceptance.length().text(),
            " / ".join(p.value_text() for p in acceptance.per_position()),
            "" if diff is None else diff.text(signed=True),
            (same if lossless.ok else f"[red]{same}[/]") if index == 0 else "",
        )


def register(app: typer.Typer) -> None:
    app.command("accept", cls=Command)(accept_command)
