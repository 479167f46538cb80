"""Options shared by several commands (Typer's public Annotated style), and the library's
:class:`~eaglequant.conversion.options.ConversionOptions` built from them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    from eaglequant.conversion.options import ConversionOptions


def conversion_options(**flags: Any) -> ConversionOptions:
    """The options ``convert`` or ``inspect`` was given, by library parameter name; a flag left out (None) keeps
    the library's default. Its errors name parameters: ``run_guarded`` says them as flags."""
    from eaglequant.conversion.options import ConversionOptions

    return ConversionOptions(**{name: value for name, value in flags.items() if value is not None})


SchemeOpt = Annotated[
    str, typer.Option("--scheme", "-s", help="Built-in scheme name (see `eaglequant schemes`) or a .toml file.")
]
FormatOpt = Annotated[
    str,
    typer.Option("--format", help="Output format (`eaglequant schemes` lists each scheme's formats and engines)."),
]
ExcludeOpt = Annotated[
    Optional[list[str]],  # noqa: UP045 - Typer needs Optional here on Python 3.10
    typer.Option(
        "--exclude",
        "-x",
        help="Keep matching linears unquantized: a glob or 're:<regex>' over checkpoint names as `inspect` "
        "shows them (e.g. 'midlayer.mlp.*'). Repeatable.",
    ),
]
QuantizeOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--quantize",
        help="Quantize matching linears that are kept by default (fc, lm_head), same syntax as --exclude. "
        "Refused where a targeted engine runs that module unquantized. Repeatable.",
    ),
]
EngineOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--engine",
        "-e",
        help="Engine that must load the result as intended (`eaglequant schemes` lists them; all: every engine). "
        "Repeatable.",
    ),
]
TargetLayersOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--target-layers",
        min=0,
        help="The target model's layer count (vLLM numbers the draft's layers after it). "
        "When unknown, exclusion rules are written to work for any count.",
    ),
]
TargetConfigOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--target-config",
        help="The target model's config.json (or its directory), to read its layer count from.",
        show_default=False,
    ),
]
SrcArg = Annotated[
    str,
    typer.Argument(
        help="Checkpoint directory, or Hub repo id org/name[@revision] (hf://org/name: the Hub, whatever is local).",
        show_default=False,
    ),
]
DstArg = Annotated[
    Path,
    typer.Argument(help="Directory to create (must not exist, nor be inside SRC).", show_default=False),
]
QuantizedDstArg = Annotated[
    Path, typer.Argument(help="Quantized checkpoint directory (what convert wrote).", show_default=False)
]

SourceOpt = Annotated[
    Optional[str],  # noqa: UP045 - Typer needs Optional here on Python 3.10
    typer.Option(
        "--source",
        help="The BF16 checkpoint DST was made from, a directory or Hub repo id (default: the one recorded in "
        "DST's report, if still there). verify, and upload before it sends, check DST against it.",
        show_default=False,
    ),
]


PromptsOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--prompts",
        help='A .jsonl of {"prompt": ...} or a text file, one prompt a line (default: the trained pair\'s held-out '
        "prompts).",
        show_default=False,
    ),
]
MaxPromptsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--max-prompts", min=1, help="Use only the first N prompts.", show_default=False),
]
