"""``eaglequant capture OUT``: draft inputs with the target's choices, for ``verify --inputs`` and ``--calib``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import (
    MAX_GENERATED_TOKENS,
    MAX_TOP_K,
    EngineArgOpt,
    EnginePythonOpt,
    MaxPromptsOpt,
    PromptsOpt,
    TensorParallelOpt,
)
from eaglequant.cli.output import note, out, result
from eaglequant.common.errors import InputError

if TYPE_CHECKING:
    from eaglequant.capturing.transformers_capture import CaptureSummary


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
    hidden_states: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--hidden-states",
            help="Read the files vLLM's hidden-states connector wrote (as speculators' data generation stores "
            "them) instead of running the target; with --target, only its final norm and lm_head are read.",
            show_default=False,
        ),
    ] = None,
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, max=MAX_TOP_K, help="Target probabilities kept per position.")
    ] = 8,
    engine: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--engine",
            help="Serve the target with this engine (vllm: its own hidden-state extraction, for any model it "
            "serves) instead of transformers in this process.",
            show_default=False,
        ),
    ] = None,
    tensor_parallel_size: TensorParallelOpt = None,
    engine_arg: EngineArgOpt = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="With --engine: the dtype the target is served in.")
    ] = "bfloat16",
    engine_python: EnginePythonOpt = None,
) -> None:
    """Capture draft inputs with the target's choices, for verify --inputs, --calib and --counts.

    The target continues each prompt greedily; its aux hidden states, the tokens and its next-token choices are
    written (the --calib format, extended). With --engine vllm, the engine serving the target does it, at any
    --tensor-parallel-size. With --specforge or --hidden-states, files a trainer or vLLM's connector already wrote
    are read instead of running the target.
    """

    def body() -> None:
        from eaglequant.capturing.transformers_capture import (
            capture,
            capture_from_hidden_states,
            capture_from_specforge,
        )
        from eaglequant.cli.progress_display import steps_display
        from eaglequant.draft.capture_file import output_path

        output_path(output)  # before any model loads
        if prompts is None and target is not None and specforge is None and hidden_states is None:
            from eaglequant.measurement.prompts import bundled_prompts_note

            if bundled := bundled_prompts_note(target):
                note(bundled)

        if engine is None:
            _no_engine_options(
                tensor_parallel_size=tensor_parallel_size, engine_arg=engine_arg, engine_python=engine_python
            )
        if specforge is not None:
            summary = capture_from_specforge(specforge, output, target=target, top_k=top_k)
        elif hidden_states is not None:
            summary = capture_from_hidden_states(hidden_states, output, draft=draft, target=target, top_k=top_k)
        elif target is None or draft is None:
            raise InputError("capture needs --target and --draft", hint="or --specforge DIR / --hidden-states DIR")
        elif engine is not None:
            from eaglequant.capturing.engine_capture import capture_through

            summary = capture_through(
                engine,
                target,
                draft,
                output,
                prompts=prompts,
                max_prompts=max_prompts,
                max_tokens=max_tokens,
                top_k=top_k,
                dtype=dtype,
                tensor_parallel_size=tensor_parallel_size or 1,
                engine_args=engine_arg or [],
                engine_python=engine_python,
                steps=steps_display(),
            )
        else:
            summary = capture(
                target,
                draft,
                output,
                prompts=prompts,
                max_prompts=max_prompts,
                max_tokens=max_tokens,
                top_k=top_k,
                steps=steps_display(),
            )
        result(summary.to_json(), lambda: render(summary))

    run_guarded(body)


def _no_engine_options(**given: object) -> None:
    """Options that only mean something with --engine, refused without it."""
    named = [name for name, value in given.items() if value]
    if named:
        flag = "--" + named[0].replace("_", "-")
        raise InputError(f"{flag} only applies with --engine", hint="add --engine vllm, or leave it out")


def render(summary: CaptureSummary) -> None:
    out.print(
        f"wrote {escape(str(summary.path))}: {summary.sequences} sequences, {summary.positions} positions "
        f"({summary.continuation_positions} after the prompts), aux layers {list(summary.aux_layer_ids)}",
        soft_wrap=True,
    )
    if summary.routing_locality is not None:
        out.print(escape(summary.routing_locality.text()), soft_wrap=True)
    if summary.routing_note:
        note(summary.routing_note)


def register(app: typer.Typer) -> None:
    app.command("capture", cls=Command)(capture_command)
