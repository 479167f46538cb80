"""``eaglequant upload DST REPO_ID``: verify, then push a quantized head to the Hugging Face Hub."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from eaglequant.cli.command import Command
from eaglequant.cli.guard import run_guarded
from eaglequant.cli.options import QuantizedDstArg, SourceOpt
from eaglequant.cli.output import absolute, info, note, out, quiet_hub_progress, result
from eaglequant.cli.progress_display import phase
from eaglequant.common.sizes import decimal_bytes
from eaglequant.record.verification import Verdict

if TYPE_CHECKING:
    from eaglequant.publish.upload import UploadResult


def upload_command(
    dst: QuantizedDstArg,
    repo_id: Annotated[
        str, typer.Argument(help="Hub repo to upload to, org/name (created if needed).", show_default=False)
    ],
    revision: Annotated[str, typer.Option("--revision", help="Branch to commit to (created if needed).")] = "main",
    private: Annotated[bool, typer.Option("--private", help="Create the repo private.")] = False,
    commit_message: Annotated[
        Optional[str],  # noqa: UP045 - Typer needs Optional here on Python 3.10
        typer.Option("--commit-message", "-m", help="Message of the upload commit.", show_default=False),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Verify and list what would be sent; send nothing.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Upload even if DST fails verify or was not verified numerically.")
    ] = False,
    source: SourceOpt = None,
) -> None:
    """Verify DST, then upload it to the Hub and print the commit URL.

    Refuses (exit 3) when DST fails verify or was never verified numerically (against --source now, or by
    convert --verify with its files unchanged since), unless --force; --dry-run follows the same rule. The token
    comes from HF_TOKEN (or `hf auth login`) and is never printed.
    """

    def body() -> None:
        from eaglequant.api import upload

        quiet_hub_progress()
        with phase("verifying" if dry_run else "verifying, then uploading"):
            uploaded = upload(
                dst,
                repo_id,
                revision=revision,
                private=private,
                commit_message=commit_message,
                dry_run=dry_run,
                force=force,
                source=source,
            )
        destination = absolute(uploaded.destination)
        shown = replace(uploaded, destination=uploaded.destination.absolute())
        result(shown.to_json(), lambda: render(uploaded, str(destination)))
        for text in uploaded.notes:
            note(text)

    run_guarded(body)


def render(uploaded: UploadResult, destination: str) -> None:
    verified = {
        Verdict.PASSED: "verify passed",
        Verdict.FAILED: "verify failed, sent with --force",
        Verdict.NOT_VERIFIED: "not verified numerically, sent with --force",
        Verdict.INCONCLUSIVE: "predicted acceptance inconclusive, sent with --force",
        None: "not verified",
    }[uploaded.verdict]
    if uploaded.dry_run:
        verified = verified.replace("sent with", "would be sent with")
    # A dry run's result is what it would send; a real upload's is its commit URL (what scripts capture).
    say = out.print if uploaded.dry_run else lambda text, **kw: info(text)
    where = f"{uploaded.repo_id}@{uploaded.revision}" + (" (private)" if uploaded.private else "")
    say(f"{escape(destination)} → {escape(where)}: {verified}", soft_wrap=True)
    width = max((len(name) for name in uploaded.files), default=0)
    for name, size in uploaded.files.items():  # sizes right-aligned in one column
        say(f"  {escape(name.ljust(width))}  {decimal_bytes(size):>10}", soft_wrap=True)
    sent = "would be sent" if uploaded.dry_run else "sent"
    say(f"{len(uploaded.files)} files, {decimal_bytes(uploaded.total_bytes)} {sent}")
    if uploaded.commit_url:
        out.print(uploaded.commit_url, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("upload", cls=Command)(upload_command)
