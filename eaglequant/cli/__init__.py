"""The ``eaglequant`` command line: a thin layer over :mod:`eaglequant.api`.

Heavy imports (torch, vendor libraries) happen inside the commands that need them, so ``--help``
answers at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Annotated, Any

import typer

from eaglequant.cli.command import HELP_OPTION_NAMES, Group
from eaglequant.cli.guard import Terminated
from eaglequant.cli.output import MODE, Mode
from eaglequant.common.version import __version__

__all__ = ["app", "entry", "main"]

app = typer.Typer(
    name="eaglequant",
    help="Quantize EAGLE-3 draft heads into checkpoints that vLLM, TensorRT-LLM and SGLang load as intended.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": HELP_OPTION_NAMES},
    cls=Group,
)


def _version(value: bool) -> None:
    if value:
        print(f"eaglequant {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks on errors (also accepted after the command).")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    MODE.__dict__.update(Mode().__dict__)  # each command starts from the defaults (tests run many in one process)
    MODE.debug = MODE.verbose = debug


def _register() -> None:
    from eaglequant.cli import (
        accept_cmd,
        batch_cmd,
        batch_merge_cmd,
        bench_cmd,
        capture_cmd,
        convert_cmd,
        explain_cmd,
        inspect_cmd,
        prune_cmd,
        schemes_cmd,
        search_cmd,
        upload_cmd,
        verify_cmd,
    )

    for module in (
        inspect_cmd,
        convert_cmd,
        prune_cmd,
        search_cmd,
        explain_cmd,
        verify_cmd,
        accept_cmd,
        capture_cmd,
        upload_cmd,
        batch_cmd,
        batch_merge_cmd,
        schemes_cmd,
        bench_cmd,
    ):
        module.register(app)


_register()


def _terminate(_signum: int, _frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> Any:
    signal.signal(signal.SIGTERM, _terminate)
    if hasattr(signal, "SIGXFSZ"):
        # Past the file size limit (ulimit -f), a write then fails with EFBIG, reported as an error,
        # instead of the signal killing the process with a half-written temporary directory.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return app(args=argv if argv is not None else sys.argv[1:], prog_name="eaglequant")


def entry() -> None:
    """The ``eaglequant`` command (and ``python -m eaglequant``): :func:`main`, then the process ends without
    Python's teardown once torch is loaded, which takes ~0.4 s and does nothing a finished command needs (every
    file is closed and every output in place by then; stdout and stderr are flushed here)."""
    try:
        main()
    except SystemExit as done:
        if "torch" not in sys.modules:
            raise
        code = done.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a reader that went away, a stream already closed
                stream.flush()
        os._exit(code or 0)
