"""``eaglequant prune SRC DST --size N --counts FILE``: the draft vocabulary cut to the tokens the target emits most."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import MAX_VOCABULARY
from eaglequant.cli.output import note, out, result
from eaglequant.common.sizes import decimal_bytes

if TYPE_CHECKING:
    from eaglequant.vocabulary.pruned_head import PruneResult


def prune_command(
    src: Annotated[Path, typer.Argument(help="The BF16 draft head (a directory).", show_default=False)],
    dst: Annotated[Path, typer.Argument(help="Where the pruned head goes (a new directory).", show_default=False)],
    size: Annotated[
        int,
        typer.Option(
            "--size", min=1, max=MAX_VOCABULARY, help="Tokens the pruned draft vocabulary keeps.", show_default=False
        ),
    ],
    counts: Annotated[
        Path,
        typer.Option(
            "--counts",
            help="How often the target emits each token: captured inputs (`eaglequant capture`; the target's own "
            "choices are counted), or a token-count file (.json: a list, or {token id: count}; .safetensors: one "
            "tensor).",
            show_default=False,
        ),
    ],
    keep: Annotated[
        Optional[list[int]],  # noqa: UP045
        typer.Option(
            "--keep",
            min=0,
            max=MAX_VOCABULARY,
            help="A token id always kept (repeatable), beside the special tokens config.json names.",
            show_default=False,
        ),
    ] = None,
    inputs: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--inputs",
            help="Captured inputs on which to predict the greedy acceptance of SRC and of the pruned head (best "
            "held out: the file the counts came from predicts too well).",
            show_default=False,
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace DST if an earlier prune wrote it.")] = False,
) -> None:
    """Cut the draft vocabulary to the tokens the target emits most often: a smaller lm_head, read every draft step.

    Writes a plain BF16 head (kept lm_head rows, d2t, t2d, draft_vocab_size) that convert, verify and the engines
    read like any other. A target choice outside the kept tokens can never be drafted: the share of the counted
    choices the draft can still propose is reported, and with --inputs the predicted acceptance.
    """

    def body() -> None:
        from eaglequant.api.pruning import prune
        from eaglequant.cli.progress_display import steps_display

        pruned = prune(
            src,
            dst,
            size=size,
            counts=counts,
            keep=keep or (),
            inputs=inputs,
            overwrite=overwrite,
            steps=steps_display(),
        )
        result(pruned.to_json(), lambda: render(pruned))

    run_guarded(body)


def render(pruned: PruneResult) -> None:
    before, after = pruned.lm_head_bytes.source, pruned.lm_head_bytes.pruned
    out.print(
        f"[green]wrote[/] {escape(str(pruned.destination))}: draft vocabulary {pruned.source_size} → {pruned.size} "
        f"tokens, lm_head {decimal_bytes(before)} → {decimal_bytes(after)}",
        soft_wrap=True,
    )
    out.print(f"  {escape(_coverage(pruned))}", soft_wrap=True)
    if pruned.special:
        out.print(f"  special tokens always kept: {list(pruned.special)}")
    if pruned.prediction is not None:
        out.print(f"  {escape(pruned.prediction.verdict)}", soft_wrap=True)
    else:
        note("acceptance not predicted: pass --inputs with captured inputs (`eaglequant capture`)")
    note(f"next: eaglequant convert {pruned.destination} DST (quantize the pruned head as any other)")


def _coverage(pruned: PruneResult) -> str:
    """The share of the counted target choices the draft can propose, before and after; said plainly when the cut
    loses none (the kept tokens were chosen from these same counts, which then cannot miss them)."""
    before, after = f"{pruned.source_coverage:.2%}", f"{pruned.coverage:.2%}"
    counted = pruned.counts_from  # "the target's choices in X" / "token counts in X"
    if before == after:
        return (
            f"the draft can still propose {after} of {counted}, as before the cut: those counts chose the kept "
            "tokens, so they measure no loss (counts of other text, or --inputs, say more)"
        )
    return f"the draft can propose {before} → {after} of {counted} (the counts that chose the kept tokens)"


def register(app: typer.Typer) -> None:
    app.command("prune", cls=Command)(prune_command)
