"""``eaglequant bench kernels`` and ``bench convert``: timings next to baselines measured in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.command import HELP_OPTION_NAMES, Command, Group
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.output import info, out, result
from eaglequant.common.sizes import decimal_bytes
from eaglequant.conversion.options import MAX_WORKERS

if TYPE_CHECKING:
    from eaglequant.bench.convert import ConvertBench
    from eaglequant.bench.kernels import KernelBench

bench_app = typer.Typer(
    help="Benchmarks: time, throughput, and ratios to baselines measured in the same run.",
    context_settings={"help_option_names": HELP_OPTION_NAMES},
    cls=Group,
)


@bench_app.command("kernels", cls=Command)
def kernels_command(
    m: Annotated[
        list[int] | None,
        typer.Option("--m", min=1, max=65_536, help="Token counts M (repeatable; default 1 4 16 64 256 2048)."),
    ] = None,
    tiny: Annotated[bool, typer.Option("--tiny", help="One small shape instead of the Kimi-K2.5 head's.")] = False,
    device: Annotated[str, typer.Option("--device", help="cuda (default when present) or cpu (torch reference).")] = "",
) -> None:
    """Time each kernel on the Kimi-K2.5 EAGLE-3 head's shapes next to torch bf16 matmul and torch._scaled_mm."""

    def body() -> None:
        import torch

        from eaglequant.bench.kernels import M_VALUES, TINY_SHAPES, bench_kernels
        from eaglequant.common.errors import InputError

        chosen = device or ("cuda" if torch.cuda.is_available() else "")
        if not chosen:
            raise InputError(
                "bench kernels times the Triton kernels and needs a CUDA GPU; none is visible",
                hint="run it on a GPU machine, or pass --device cpu --tiny to time the torch reference",
            )
        if chosen == "cuda" and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA GPU is visible")
        bench = bench_kernels(chosen, tuple(m or M_VALUES), TINY_SHAPES if tiny else None)
        result(bench.to_json(), lambda: render(bench))

    run_guarded(body)


@bench_app.command("convert", cls=Command)
def convert_command(
    cache_dir: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--cache-dir", help="Where the synthetic heads are kept (default: bench/ in ~/.cache/eaglequant)."
        ),
    ] = None,
    work_dir: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--work-dir", help="Where outputs are written and deleted (default: CACHE_DIR/runs)."),
    ] = None,
    head: Annotated[
        list[str] | None,
        typer.Option("--head", help="kimi-llama, kimi-mla (the default: both) or tiny (a quick check that it runs)."),
    ] = None,
    scheme: Annotated[
        list[str] | None, typer.Option("--scheme", help="Schemes to time (repeatable; default every built-in one).")
    ] = None,
    anchors: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option(
            "--anchors/--no-anchors",
            help="Also time amd-quark and llm-compressor when installed (default: yes, except for --head tiny alone).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--workers", min=1, max=MAX_WORKERS, help="Passed to convert (default: convert's own default)."),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Passed to convert: cpu (the default) or cuda.")] = "cpu",
    verify: Annotated[
        bool,
        typer.Option(
            "--verify-run/--no-verify-run",
            help="Also time verify of the first scheme's output, and convert --verify of it.",
        ),
    ] = True,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the table as Markdown (for docs).")] = False,
) -> None:
    """Time convert on full-size synthetic Kimi-K2.5 heads next to the copy floor and the vendor tools.

    The heads (6.4 GB and 5.8 GB of bf16) are generated once and cached; each run writes and then
    deletes its output, so the work directory needs about 7 GB free. Timings are for a warm page cache.
    """

    def body() -> None:
        from eaglequant.bench.convert import measure_convert
        from eaglequant.bench.heads import FULL_SIZE_HEADS, HEADS_BY_NAME
        from eaglequant.common.errors import InputError

        for name in head or []:
            if name not in HEADS_BY_NAME:
                raise InputError(f"--head {name!r}: unknown head", hint=f"choose from {', '.join(HEADS_BY_NAME)}")
        cache = cache_dir or Path.home() / ".cache" / "eaglequant" / "bench"
        work = work_dir or cache / "runs"
        work.mkdir(parents=True, exist_ok=True)
        bench = measure_convert(
            cache,
            work,
            heads=tuple(head or FULL_SIZE_HEADS),
            schemes=tuple(scheme) if scheme else None,
            anchors=anchors,
            workers=workers,
            device=device,
            verify=verify,
            log=lambda line: info(f"[dim]{escape(line)}[/]", markup=True),
        )
        result(bench.to_json(), lambda: print(convert_markdown(bench)) if markdown else out.print(convert_table(bench)))

    run_guarded(body)


CONVERT_COLUMNS = ("head", "run", "scheme", "wall s", "MB/s in", "peak RSS GB", "× copy", "× anchors")


def _figure(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def convert_rows(bench: ConvertBench) -> list[list[str]]:
    rows = []
    for run in bench.runs:
        anchors = ", ".join(f"{ratio:.2f}× {name}" for name, ratio in run.vs_anchors.items())
        rss = None if run.peak_rss_bytes is None else run.peak_rss_bytes / 10**9
        rows.append(
            [
                run.head,
                run.kind,
                run.scheme,
                run.error or _figure(run.wall_s, ".1f"),
                _figure(run.input_mb_per_s, ".0f"),
                _figure(rss, ".2f"),
                _figure(run.vs_copy, ".2f"),
                anchors,
            ]
        )
    return rows


def convert_table(bench: ConvertBench) -> Table:
    m = bench.machine
    table = Table(title=f"{m.cpu}, {m.cores} cores, {decimal_bytes(m.memory_bytes)}", title_justify="left")
    for col in CONVERT_COLUMNS:
        table.add_column(col)
    for row in convert_rows(bench):
        table.add_row(*(escape(cell) for cell in row))
    return table


def convert_markdown(bench: ConvertBench) -> str:
    lines = ["| " + " | ".join(CONVERT_COLUMNS) + " |", "|" + "---|" * len(CONVERT_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in convert_rows(bench)]
    return "\n".join(lines)


def render(bench: KernelBench) -> None:
    table = Table(title=f"{bench.device}: copy bandwidth {bench.copy_gbps:.0f} GB/s", title_justify="left")
    for col in ("shape", "M", "kernel", "ms", "TFLOP/s", "GB/s", "% copy bw", "× bf16"):
        table.add_column(col, justify="right" if col not in ("shape", "kernel") else "left")
    for row in bench.rows:
        table.add_row(
            row.shape,
            str(row.m),
            row.kernel,
            f"{row.ms:.4f}",
            f"{row.tflops:.2f}",
            f"{row.gbps:.0f}",
            f"{row.percent_of_copy_bandwidth:.0f}",
            f"{row.speedup_vs_bf16:.2f}",
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
