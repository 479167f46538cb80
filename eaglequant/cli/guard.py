"""A command body run so that our errors end as one line and an exit code (a traceback only with --debug)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import TypeVar

import typer

from eaglequant.cli.command import cli_wording
from eaglequant.cli.output import MODE, error, info, quiet_libraries
from eaglequant.common.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED, EagleQuantError

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, a container stopped): unwound like Ctrl-C, so temporaries are removed."""


def run_guarded(action: Callable[[], T]) -> T:
    """Run a command body; turn our errors into one line and an exit code (traceback only with --debug)."""
    try:
        with quiet_libraries():
            return action()
    except EagleQuantError as exc:
        if MODE.debug:
            traceback.print_exc()
        error(exc.one_line(cli_wording), exc.exit_code, type(exc).__name__)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt as exc:
        code = EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
        if MODE.json:
            error("interrupted; nothing was written", code, type(exc).__name__)
        else:
            info("[yellow]interrupted[/]; nothing was written", markup=True)
        raise typer.Exit(code) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        if MODE.debug:
            traceback.print_exc()
        message = f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback and report it)"
        error(message, EXIT_INTERNAL, type(exc).__name__, internal=True)
        raise typer.Exit(EXIT_INTERNAL) from None
