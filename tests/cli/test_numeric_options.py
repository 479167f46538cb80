"""Every numeric option of every command refuses zero (where it must be positive), negative, non-finite and absurd
values with one usage line naming the option and exit 2, never a crash."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.models import OptionInfo

from tests.conftest import FIXTURES, run_cli


@dataclass(frozen=True)
class NumericOption:
    command: tuple[str, ...]  # ("bench", "convert")
    flag: str
    kind: type  # int or float
    info: OptionInfo

    def __str__(self) -> str:
        return f"{' '.join(self.command)} {self.flag}"


def _number_type(annotation: object) -> type | None:
    """int or float, inside Optional[...] or list[...]; None for any other type."""
    if annotation in (int, float):
        return annotation  # type: ignore[return-value]
    for inner in typing.get_args(annotation):
        found = _number_type(inner)
        if found is not None:
            return found
    return None


def _annotated(hint: object) -> object:
    """The Annotated form inside ``hint``: Python 3.10 wraps an option whose default is None in Optional[...]."""
    if hasattr(hint, "__metadata__"):
        return hint
    return next((arg for arg in typing.get_args(hint) if hasattr(arg, "__metadata__")), hint)


def numeric_options() -> list[NumericOption]:
    """Each option of a numeric type in every command and sub-command, read from the command functions' declared
    options (typer.Option in Annotated, its public form)."""
    from eaglequant.cli import app

    found: list[NumericOption] = []

    def walk(group: typer.Typer, path: tuple[str, ...]) -> None:
        for command in group.registered_commands:
            hints = typing.get_type_hints(command.callback, include_extras=True)
            for hint in map(_annotated, hints.values()):
                infos = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, OptionInfo)]
                kind = _number_type(typing.get_args(hint)[0]) if infos else None
                if kind is not None:
                    flag = (*infos[0].param_decls, infos[0].default)[
                        0
                    ]  # typer.Option("--draft-tokens"): the flag is the default
                    found.append(NumericOption((*path, command.name or ""), flag, kind, infos[0]))
        for sub in group.registered_groups:
            assert sub.typer_instance is not None
            walk(sub.typer_instance, (*path, sub.name or ""))

    walk(app, ())
    return found


OPTIONS = numeric_options()


def test_the_walk_finds_the_numeric_options() -> None:
    flags = {str(option) for option in OPTIONS}
    assert {
        "inspect --draft-tokens",
        "convert --workers",
        "accept --temperature",
        "verify --seed",
        "capture --top-k",
    } <= flags
    assert {"bench convert --workers", "explain --target-layers", "accept --max-prompts"} <= flags


def bad_values(option: NumericOption) -> list[str]:
    """Values outside the option's range: below its minimum, zero where it must be positive, non-finite, absurd."""
    values = ["nan", "inf", "-inf", "1e400", str(10**30), "-1", str(option.info.min - 1)]
    if option.info.min > 0 or option.kind is float:  # a float option's minimum is open (temperatures)
        values.append("0")
    return values


@pytest.mark.parametrize("option", OPTIONS, ids=str)
def test_each_numeric_option_has_bounds_and_refuses_what_is_outside(option: NumericOption) -> None:
    assert option.info.min is not None and option.info.max is not None, f"{option} needs min= and max="
    for value in bad_values(option):
        result = run_cli(*option.command, option.flag, value, "x")
        assert result.exit_code == 2, (str(option), value, result.stdout, result.stderr)
        assert option.flag in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


SIZE_WORDS = st.sampled_from(["inf", "nan", "-inf", "1e400", "0", "-1", "0.1", "2e30", "1e16GB", "infGB", "nanMB"])


@settings(max_examples=40, deadline=None)
@given(st.one_of(SIZE_WORDS, st.floats(allow_nan=True, allow_infinity=True).map(repr)))
def test_max_shard_size_is_a_size_or_one_usage_line(text: str) -> None:
    from eaglequant.common.errors import InputError
    from eaglequant.conversion.options import LARGEST_MAX_SHARD_SIZE, parse_size

    units = {"GB": 10**9, "MB": 10**6}
    number, unit = (text[:-2], units[text[-2:]]) if text[-2:] in units else (text, 1)
    try:
        size = float(number) * unit
    except ValueError:
        size = math.nan
    if math.isfinite(size) and 1 <= size <= LARGEST_MAX_SHARD_SIZE:
        assert parse_size(text) == int(size)
        return
    with pytest.raises(InputError, match="max_shard_size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["inf", "nan", "1e400", "0", "-1", "2e30", "0.1"])
def test_convert_refuses_a_max_shard_size_that_is_not_a_size(text: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("convert", FIXTURES / "specforge-llama", tmp_path / "out", "--max-shard-size", text)
    assert result.exit_code == 2 and "--max-shard-size" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("temperature", [math.nan, math.inf, 0.0, -1.0])
def test_the_library_refuses_a_temperature_that_is_not_above_zero(temperature: float) -> None:
    from eaglequant.api.acceptance import accept
    from eaglequant.common.errors import InputError

    with pytest.raises(InputError, match="temperatures"):
        accept(["x"], target="x", temperatures=[temperature])


@pytest.mark.parametrize("command", ["inspect", "explain", "search"])
def test_a_target_of_no_layers_is_refused_in_one_line(command: str, tmp_path: Path) -> None:
    """vLLM numbers the draft's layers after the target's: a target of 0 layers is no target (exit 2, no trace)."""
    args = {"inspect": [FIXTURES / "specforge-llama"], "explain": [FIXTURES / "specforge-llama"],
            "search": [FIXTURES / "specforge-llama", tmp_path / "out", "--inputs", tmp_path / "x.safetensors",
                       "--max-acceptance-drop", "0.05"]}[command]  # fmt: skip
    result = run_cli(command, *map(str, args), "--target-layers", "0")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "--target-layers" in result.stderr and "Traceback" not in result.stderr


def test_errors_name_what_was_typed_without_internal_reprs(tmp_path: Path) -> None:
    """An empty prompts file and a DST that does not exist: one line each naming the flag or argument as typed."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    pair = FIXTURES / "trained-pair"
    captured = run_cli("capture", str(tmp_path / "c.safetensors"), "--target", str(pair / "target"), "--draft",
                       str(pair / "draft"), "--prompts", str(empty))  # fmt: skip
    assert captured.exit_code == 2 and f"--prompts {empty}: holds no prompt" in captured.stderr, captured.stderr
    assert "Param(" not in captured.stderr
    missing = tmp_path / "nope"
    accepted = run_cli("accept", str(missing), "--target", str(pair / "target"))
    assert accepted.exit_code == 2 and f"DST {missing}: does not exist" in accepted.stderr, accepted.stderr
