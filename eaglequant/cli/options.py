"""Options shared by several commands (Typer's public Annotated style)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

SchemeOpt = Annotated[
    str, typer.Option("--scheme", "-s", help="Built-in scheme name (see `eaglequant schemes`) or a .toml file.")
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format", "-f", help="Output format: quark, modelopt or compressed-tensors (see `eaglequant schemes`)."
    ),
]
ExcludeOpt = Annotated[
    Optional[list[str]],  # noqa: UP045 - Typer needs Optional here on Python 3.10
    typer.Option(
        "--exclude",
        "-x",
        help="Keep matching linears unquantized: a glob or 're:<regex>' over checkpoint names as `inspect` "
        "shows them (e.g. 'midlayer.mlp.*'). Repeatable. fc and lm_head are always kept.",
    ),
]
EngineOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--engine", "-e", help="Engine that must load the result as intended: vllm, trtllm, sglang. Repeatable."
    ),
]
TargetLayersOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--target-layers",
        min=0,
        help="The target model's layer count (engines name the draft layer after it). "
        "When unknown, exclusion rules are written to work for any count.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON result on stdout.")]
