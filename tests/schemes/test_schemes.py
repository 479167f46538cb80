"""Declarative schemes: every built-in file parses, round-trips, and bad files fail with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.common import toml as tomllib
from eaglequant.common.errors import SchemeError
from eaglequant.schemes.model import builtin_scheme_names, load_scheme, parse_scheme, scheme_to_toml
from tests.conftest import ROOT, run_cli

BUILTINS = sorted(p.stem for p in (ROOT / "schemes").glob("*.toml"))


def test_builtin_files_are_the_registered_schemes() -> None:
    assert builtin_scheme_names() == BUILTINS
    assert {"fp8-per-channel", "nvfp4", "mxfp4", "mxfp4-w4a16"} <= set(BUILTINS)


@pytest.mark.parametrize("name", BUILTINS)
def test_show_round_trips(name: str, tmp_path: Path) -> None:
    shown = run_cli("schemes", "--show", name)
    assert shown.exit_code == 0
    copy = tmp_path / "copy.toml"
    copy.write_text(shown.stdout)
    original, reloaded = load_scheme(name), load_scheme(str(copy))
    assert (original.weight, original.activation, original.if_uncalibrated) == (
        reloaded.weight,
        reloaded.activation,
        reloaded.if_uncalibrated,
    )
    canonical = parse_scheme(tomllib.loads(scheme_to_toml(original)), original.source)
    assert canonical == original


@pytest.mark.parametrize(
    ("name", "kinds", "label"),
    [
        ("fp8-per-channel", ("fp8-channel", "fp8-token"), "W8A8"),
        ("nvfp4", ("nvfp4", "nvfp4"), "W4A4"),
        ("mxfp4", ("mxfp4", "mxfp4"), "W4A4"),
        ("mxfp4-w4a16", ("mxfp4", None), "W4A16"),
    ],
)
def test_builtin_kinds(name: str, kinds: tuple, label: str) -> None:
    scheme = load_scheme(name)
    assert scheme.kinds == kinds and scheme.label == label


def test_nvfp4_without_calibration_is_weight_only() -> None:
    scheme = load_scheme("nvfp4")
    assert scheme.needs_calibration
    assert scheme.without_calibration().kinds == ("nvfp4", None)


NVFP4_WEIGHT = {"dtype": "fp4_e2m1", "granularity": "block", "block_size": 16, "scale_dtype": "fp8_e4m3"}
BAD = [
    ({"name": "x", "weight": {"dtype": "int4", "granularity": "channel"}}, "dtype 'int4'"),
    ({"name": "x", "weight": {"dtype": "fp8_e4m3", "granularity": "tensor"}}, "not supported"),
    ({"name": "x", "weight": {**NVFP4_WEIGHT, "block_size": 64}}, "block_size = 64"),
    ({"name": "x", "weight": {**NVFP4_WEIGHT, "scale_dtype": "e8m0"}}, "does not fit"),
    ({"name": "x", "weight": {"dtype": "fp4_e2m1", "granularity": "block"}}, "ambiguous"),
    ({"name": "x", "weight": {"dtype": "fp8_e4m3", "granularity": "channel", "colour": 1}}, "unknown key 'colour'"),
    ({"name": "x", "wieght": {}}, "unknown key 'wieght'"),
    ({"weight": {"dtype": "fp8_e4m3", "granularity": "channel"}}, "missing key 'name'"),
    (
        {
            "name": "x",
            "weight": {"dtype": "fp8_e4m3", "granularity": "channel"},
            "activation": {"dtype": "fp4_e2m1", "granularity": "block", "block_size": 32, "dynamic": True},
        },
        "do not pair",
    ),
    (
        {
            "name": "x",
            "weight": {"dtype": "fp8_e4m3", "granularity": "channel"},
            "activation": {"dtype": "fp8_e4m3", "granularity": "token", "dynamic": False},
        },
        "static activation scales",
    ),
    (
        {
            "name": "x",
            "weight": {"dtype": "fp8_e4m3", "granularity": "channel"},
            "activation": {"dtype": "fp8_e4m3", "granularity": "token", "dynamic": True, "if_uncalibrated": "refuse"},
        },
        "if_uncalibrated applies only",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_scheme_is_refused(data: dict, message: str) -> None:
    with pytest.raises(SchemeError, match=message):
        parse_scheme(data, "user.toml")


def test_bad_scheme_file_from_cli_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n[weight]\ndtype = "fp4_e2m1"\ngranularity = "channel"\n')
    result = run_cli("convert", ROOT / "fixtures" / "specforge-llama", tmp_path / "out", "--scheme", str(path))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "mine.toml" in result.stderr
    assert not (tmp_path / "out").exists()


def test_user_scheme_file_converts(tmp_path: Path) -> None:
    path = tmp_path / "my-mx.toml"
    path.write_text(
        'name = "my-mx"\n[weight]\ndtype = "fp4_e2m1"\ngranularity = "block"\nblock_size = 32\nscale_dtype = "e8m0"\n'
    )
    result = run_cli(
        "convert", ROOT / "fixtures" / "specforge-llama", tmp_path / "out", "--scheme", str(path), "--format", "quark"
    )
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "out" / "config.json").is_file()
