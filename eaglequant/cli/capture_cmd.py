"""``eaglequant capture OUT``: draft inputs with the target's choices, for ``verify --inputs`` and ``--calib``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import MAX_GENERATED_TOKENS, MAX_TOP_K, MaxPromptsOpt, PromptsOpt
from eaglequant.cli.output import out, result
from eaglequant.common.errors import InputError

if TYPE_CHECKING:
    from eaglequant.acceptance.capture import CaptureSummary


def capture_command(
    output: Annotated[Path, typer.Argument(help="The .safetensors file to write.", show_default=False)],
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--target",
            help="The target model's directory (transformers); with --specforge, only its lm_head is read.",
            show_default=False,
        ),
    ] = None,
    draft: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--draft", help="The draft (its config names the aux layer ids).", show_default=False),
    ] = None,
    specforge: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--specforge",
            help="Read SpecForge's offline hidden-state files (prepare_hidden_states.py's "
            "output directory) instead of running the target.",
            show_default=False,
        ),
    ] = None,
    prompts: PromptsOpt = None,
    max_prompts: MaxPromptsOpt = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=4, max=MAX_GENERATED_TOKENS, help="Tokens the target generates a prompt.")
    ] = 96,
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, max=MAX_TOP_K, help="Target probabilities kept per position.")
    ] = 8,
) -> None:
    """Capture draft inputs with the target's choices, for verify --inputs and --calib.

    The target continues each prompt greedily; its aux hidden states, the tokens and its next-token choices are
    written (the --calib format, extended). With --specforge, a trainer's hidden-state files are read instead.
    """

    def body() -> None:
        from eaglequant.acceptance.capture import capture, capture_from_specforge

        if specforge is not None:
            summary = capture_from_specforge(specforge, output, target=target, top_k=top_k)
        else:
            if target is None or draft is None:
                raise InputError("capture needs --target and --draft", hint="or --specforge DIR to read trainer files")
            summary = capture(
                target, draft, output, prompts=prompts, max_prompts=max_prompts, max_tokens=max_tokens, top_k=top_k
            )
        result(summary.to_json(), lambda: render(summary))

    run_guarded(body)


def render(summary: CaptureSummary) -> None:
    out.print(
        f"wrote {escape(str(summary.path))}: {summary.sequences} sequences, {summary.positions} positions "
        f"({summary.continuation_positions} after the prompts), aux layers {list(summary.aux_layer_ids)}"
    )


def register(app: typer.Typer) -> None:
    app.command("capture", cls=Command)(capture_command)
