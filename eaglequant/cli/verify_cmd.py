"""``eaglequant verify DST``: structure for each engine, per-layer kernel parity, draft-head fidelity."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from eaglequant.cli.options import JsonOpt, TargetConfigOpt, TargetLayersOpt
from eaglequant.cli.output import err, print_json
from eaglequant.errors import EXIT_CHECK_FAILED

SourceOpt = Annotated[
    Optional[str],  # noqa: UP045 - Typer needs Optional here on Python 3.10
    typer.Option(
        "--source",
        help="The BF16 checkpoint DST was made from, a directory or Hub repo id (default: the one recorded in "
        "DST's report, if present).",
        show_default=False,
    ),
]


def verify_command(
    dst: Annotated[Path, typer.Argument(help="Quantized checkpoint directory.", show_default=False)],
    source: SourceOpt = None,
    engine: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--engine", "-e", help="Engines whose loading is checked (default: those DST was made for)."),
    ] = None,
    target_layers: TargetLayersOpt = None,
    target_config: TargetConfigOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the activations and draft inputs.")] = 0,
    tokens: Annotated[int, typer.Option("--tokens", min=1, help="Draft positions in the fidelity run.")] = 32,
    json_out: JsonOpt = False,
) -> None:
    """Check DST: structure per engine, per-layer kernel parity, draft-head fidelity.

    Thresholds come from the verify table of the scheme file. Exits 3 when a check fails.
    """
    from eaglequant.cli import run_guarded

    def body() -> bool:
        from eaglequant.api import verify

        report = verify(
            dst,
            source=source,
            engines=engine or [],
            target_layers=target_layers,
            target_config=target_config,
            seed=seed,
            tokens=tokens,
        )
        data = report.to_json()
        if json_out:
            print_json(data)
        else:
            render(data)
        return report.ok

    if not run_guarded(body):
        raise typer.Exit(EXIT_CHECK_FAILED)


def render(data: dict[str, Any]) -> None:
    limits = data["thresholds"]
    err.print(f"[bold]{escape(data['destination'])}[/]: {data['format']}, {data['scheme']} ({data['scheme_label']})")
    if data["layers"]:
        table = Table(title="per-layer parity (fused kernel vs source GEMM)", title_justify="left")
        for col in (
            "module",
            "backend",
            f"SQNR dB ≥ {limits['min_sqnr_db']}",
            f"cosine ≥ {limits['min_cosine']}",
            f"rel. error ≤ {limits['max_relative_error']}",
        ):
            table.add_column(col)
        for row in data["layers"]:
            mark = "[red]" if row["failed"] else ""
            sqnr = row["sqnr_db"]
            table.add_row(
                f"{mark}{escape(row['module'])}",
                row["backend"],
                f"{sqnr:.1f}" if isinstance(sqnr, float) else str(sqnr),
                f"{row['cosine']:.5f}",
                f"{row['relative_error']:.4f}",
            )
        err.print(table)
    fidelity = data["fidelity"]
    if fidelity:
        parts = [f"hidden cosine {fidelity['hidden_cosine']:.5f}"]
        if fidelity["top1_agreement"] is not None:
            parts.insert(0, f"top-1 agreement {fidelity['top1_agreement']:.3f} (≥ {limits['min_top1_agreement']})")
            parts.insert(1, f"mean KL {fidelity['mean_kl']:.2e} (≤ {limits['max_mean_kl']})")
        err.print(f"draft head over {fidelity['tokens']} positions: " + ", ".join(parts))
    for note in data["notes"]:
        err.print(f"[yellow]note[/]: {escape(note)}", markup=True)
    if data["ok"]:
        err.print("[green]ok[/]: structure, parity and fidelity checks hold", markup=True)
    for problem in data["problems"]:
        err.print(f"[bold red]problem[/]: {escape(problem)}", markup=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
