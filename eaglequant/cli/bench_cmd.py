"""``eaglequant bench kernels``: time the fused dequant-GEMM kernels against torch baselines."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from eaglequant.cli.options import JsonOpt
from eaglequant.cli.output import err, print_json

bench_app = typer.Typer(help="Benchmarks: time, throughput, and ratios to baselines measured in the same run.")


@bench_app.command("kernels")
def kernels_command(
    m: Annotated[
        list[int] | None, typer.Option("--m", help="Token counts M (repeatable; default 1 4 16 64 256 2048).")
    ] = None,
    tiny: Annotated[bool, typer.Option("--tiny", help="One small shape instead of the Kimi-K2.5 head's.")] = False,
    device: Annotated[str, typer.Option("--device", help="cuda (default when present) or cpu (torch reference).")] = "",
    json_out: JsonOpt = False,
) -> None:
    """Time each kernel on the Kimi-K2.5 EAGLE-3 head's shapes next to torch bf16 matmul and torch._scaled_mm."""
    from eaglequant.cli import run_guarded

    def body() -> None:
        import torch

        from eaglequant.bench.kernels import M_VALUES, TINY_SHAPES, bench_kernels
        from eaglequant.errors import InputError

        chosen = device or ("cuda" if torch.cuda.is_available() else "")
        if not chosen:
            raise InputError(
                "bench kernels times the Triton kernels and needs a CUDA GPU; none is visible",
                hint="run it on a GPU machine, or pass --device cpu --tiny to time the torch reference",
            )
        if chosen == "cuda" and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA GPU is visible")
        result = bench_kernels(chosen, tuple(m or M_VALUES), TINY_SHAPES if tiny else None)
        if json_out:
            print_json(result)
        else:
            render(result)

    run_guarded(body)


def render(result: dict[str, Any]) -> None:
    table = Table(title=f"{result['device']}: copy bandwidth {result['copy_gbps']:.0f} GB/s", title_justify="left")
    for col in ("shape", "M", "kernel", "ms", "TFLOP/s", "GB/s", "% copy bw", "× bf16"):
        table.add_column(col, justify="right" if col not in ("shape", "kernel") else "left")
    for row in result["rows"]:
        table.add_row(
            row["shape"],
            str(row["m"]),
            row["kernel"],
            f"{row['ms']:.4f}",
            f"{row['tflops']:.2f}",
            f"{row['gbps']:.0f}",
            f"{row['percent_of_copy_bandwidth']:.0f}",
            f"{row['speedup_vs_bf16']:.2f}",
        )
    err.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
