"""What every command shares: ``-h``, ``--json``, ``-q``, ``-v``, ``--debug`` (also after the subcommand),
tidy help, JSON usage errors, and the library's parameter names turned into the flags a user types."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from eaglequant.cli.output import MODE, error
from eaglequant.common.errors import EXIT_BAD_INPUT, Param, Style

HELP_OPTION_NAMES = ["-h", "--help"]
# Click's usage error, the base of typer.BadParameter: named through it since Typer may vendor its own Click.
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _set_json(value: bool) -> bool:
    MODE.json = MODE.json or value
    return value


def _set_quiet(value: bool) -> bool:
    MODE.quiet = MODE.quiet or value
    return value


def _set_verbose(value: bool) -> bool:
    MODE.verbose = MODE.verbose or value
    return value


def _set_debug(value: bool) -> bool:
    MODE.debug = MODE.debug or value
    MODE.verbose = MODE.verbose or value
    return value


def _template(
    json: Annotated[bool, typer.Option("--json", callback=_set_json, help="Print one JSON result on stdout.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", callback=_set_quiet, help="Print only the result and errors.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", callback=_set_verbose, help="Also print details and each phase's duration."),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", callback=_set_debug, help="Show full tracebacks on errors.")
    ] = False,
) -> None:
    """The options every command takes (their values go to MODE, not to the command)."""


def _common_params() -> list[Any]:
    template = typer.Typer(add_completion=False)  # no --install-completion / --show-completion on every command
    template.command()(_template)
    params = typer.main.get_command(template).params
    for param in params:
        param.expose_value = False
    return [p for p in params if p.name != "help"]


class _TidyHelp:
    """Help as users read it: the docstring's line breaks joined, each option's help tidied."""

    help: str | None
    params: list[Any]

    def _tidy(self) -> None:
        self.help = tidy_help(self.help)
        for param in self.params:
            _tidy_param(param)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _tidy_param(option)
        return option


class Command(_TidyHelp, TyperCommand):
    """A Typer command with the shared options and help as users read it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["context_settings"] = {**(kwargs.get("context_settings") or {}), "help_option_names": HELP_OPTION_NAMES}
        super().__init__(*args, **kwargs)
        self.params.extend(_common_params())
        self._tidy()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes the list
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            usage_error(exc, ctx, given)


class Group(_TidyHelp, TyperGroup):
    """The top-level command (and ``bench``): help as users read it; alone, it prints its help (exit 0)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tidy()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and (self.no_args_is_help or not self.invoke_without_command) and not ctx.resilient_parsing:
            typer.echo(ctx.get_help())  # asked for nothing: the help is the answer, on stdout
            raise typer.Exit(0)
        given = list(args)
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            usage_error(exc, ctx, given)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # no such command
            usage_error(exc, ctx, args)


def usage_error(exc: Exception, ctx: Any, given: list[str]) -> NoReturn:
    """A bad option, value, argument or command as the one ``error:`` line every error is (not click's usage and
    box), naming the help to read; under --json also the JSON error on stdout. Exit 2."""
    if "--json" in given:  # the callback that sets it has not run: the parse failed
        MODE.json = True
    where = getattr(exc, "ctx", None) or ctx
    message = getattr(exc, "format_message", lambda: str(exc))().rstrip(".")
    see = f"see '{where.command_path} -h'"
    error(f"{message} ({see})" if message.endswith("?") else f"{message}; {see}", EXIT_BAD_INPUT, "UsageError")
    raise typer.Exit(EXIT_BAD_INPUT)


def tidy_help(text: str | None) -> str | None:
    """Docstring paragraphs as single lines (the terminal wraps them), with no rich markup read into them."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(escape(" ".join(p.split())) for p in paragraphs)


def _tidy_param(param: Any) -> None:
    if isinstance(param, TyperArgument):
        if param.metavar is None:
            param.metavar = (param.name or "").upper()  # SRC, DST, as the help text names them
        # usage as users write it (SRC DST, [SRC], SUMMARY...), and no Python type beside the name (Typer's
        # methods, shadowed on this instance; tests/cli/test_cli_layout.py holds the help to it)
        vars(param).update(_usage_display_name=lambda: _usage_name(param), display_type_rich=lambda ctx: None)
    elif getattr(param, "is_flag", False) and param.metavar is None:
        param.metavar = ""  # a flag takes no value: no <bool> beside it
    elif param.metavar is None and not getattr(param, "is_flag", False):
        param.metavar = _value_word(param)  # TEXT, N, PATH, not <str>, <int range>, <list[Path]>
    if getattr(param, "help", None):
        param.help = escape(" ".join(param.help.split()))  # '[@revision]' is text, not rich markup


def _usage_name(argument: Any) -> str:
    name = str(argument.metavar).removesuffix("...")
    name = name if argument.required else f"[{name}]"
    return name + ("..." if argument.nargs != 1 else "")


def _value_word(option: Any) -> str | None:
    """What an option takes, in a word; None (Typer's own display) for choices and what is not recognised."""
    desc = getattr(option, "type_descriptor", None)
    if desc is None or desc.is_choice:
        return None
    if desc.is_path:
        return "PATH"
    annotation = desc.annotation
    element = (getattr(annotation, "__args__", None) or (annotation,))[0] if desc.is_list else annotation
    if element is Path or getattr(element, "__name__", "") == "Path":
        return "PATH"
    return {int: "N", float: "X", str: "TEXT"}.get(element)


def _flags() -> dict[str, str]:
    """Library parameters (as errors name them) -> the flag a command-line user types: the conversion's options as
    :class:`ConversionOptions` declares them, and the commands' own."""
    from eaglequant.conversion.options import OPTION_SPECS

    declared = {name: spec.flag for name, spec in OPTION_SPECS.items()}
    own = {"overwrite": "--overwrite", "overwrite_any": "--overwrite-any", "force": "--force"}
    flags = {
        **declared,
        **own,
        "source": "--source",
        "inputs": "--inputs",
        "draft_tokens": "--draft-tokens",
        "max_draft_tokens": "--max-draft-tokens",
        "vocab_sizes": "--vocab-size",
        "counts": "--counts",
    }
    positional = {"dsts": "DST"}  # arguments, named as the usage line names them
    return {**flags, **positional}


_FLAGS = _flags()


def cli_wording(param: Param) -> str:
    """A parameter as the command line says it: ``--overwrite``, ``--source SRC``, ``--max-shard-size 'lots'``."""
    flag = _FLAGS.get(param.name, "--" + param.name.replace("_", "-"))
    if param.style is None or param.style is Style.SWITCH:
        return flag
    return f"{flag} {param.value!r}" if param.style is Style.GIVEN else f"{flag} {param.value}"
