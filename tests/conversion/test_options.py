"""ConversionOptions: defaults in one place, values checked once, errors that name the parameter (the CLI says
the flag, batch the job file's key), and what the manifest records of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eaglequant.cli.command import cli_wording
from eaglequant.common.errors import InputError, SchemeError, switch
from eaglequant.conversion.options import (
    DEFAULT_ENGINES,
    DEFAULT_FORMAT,
    DEFAULT_MAX_SHARD_BYTES,
    DEFAULT_MAX_SHARD_SIZE,
    DEFAULT_SCHEME,
    OPTION_NAMES,
    ConversionOptions,
    parse_size,
)
from tests.conftest import FIXTURES, run_cli


def test_defaults_are_normalised_once() -> None:
    options = ConversionOptions()
    assert (options.scheme, options.format, options.engines) == (DEFAULT_SCHEME, DEFAULT_FORMAT, DEFAULT_ENGINES)
    assert options.max_shard_bytes == 5 * 10**9 and options.resolved_scheme.name == DEFAULT_SCHEME
    given = ConversionOptions(engines=["sglang", "vllm", "sglang"], exclude=["fc"], max_shard_size="2GiB")
    assert given.engines == ("sglang", "vllm") and given.exclude == ("fc",) and given.max_shard_bytes == 2 * 2**30
    assert hash(given) == hash(ConversionOptions(engines=("sglang", "vllm"), exclude=("fc",), max_shard_size="2GiB"))


def test_convert_prune_and_search_take_their_defaults_from_one_place() -> None:
    import inspect

    from eaglequant.conversion.pipeline import write_output
    from eaglequant.search.smallest import search

    assert parse_size(DEFAULT_MAX_SHARD_SIZE) == DEFAULT_MAX_SHARD_BYTES == 5 * 10**9
    assert inspect.signature(write_output).parameters["max_shard_bytes"].default == DEFAULT_MAX_SHARD_BYTES
    assert inspect.signature(search).parameters["engines"].default is DEFAULT_ENGINES


def test_build_changes_fields_by_name_and_refuses_unknown_ones() -> None:
    base = ConversionOptions(scheme="nvfp4", format="modelopt")
    changed = ConversionOptions.build(base, workers=2)
    assert (changed.scheme, changed.workers) == ("nvfp4", 2) and ConversionOptions.build(base) is base
    with pytest.raises(TypeError, match="unexpected option 'schem'"):
        ConversionOptions.build(schem="nvfp4")
    with pytest.raises(TypeError):
        ConversionOptions.build(max_shard_bytes=5)  # derived, not given


@pytest.mark.parametrize(
    ("settings", "error", "library", "cli"),
    [
        ({"max_shard_size": "lots"}, InputError, "max_shard_size='lots' is not a size", "--max-shard-size 'lots'"),
        ({"scheme": "nvfp"}, SchemeError, "scheme='nvfp': unknown scheme 'nvfp'", "--scheme 'nvfp'"),
        ({"format": "modelop"}, SchemeError, "format='modelop': unknown format", "--format 'modelop'"),
        ({"engines": ["vllm", "tensorrt"]}, InputError, "engines='tensorrt': unknown engine", "--engine 'tensorrt'"),
        ({"quantize": ["re:(fc"]}, InputError, "quantize='re:(fc' is not a valid regular", "--quantize 're:(fc'"),
        ({"exclude": "fc"}, InputError, "exclude must be a list of non-empty strings", None),
        ({"target_layers": -1}, InputError, "target_layers must be >= 1, not -1", None),
        ({"target_layers": 0}, InputError, "target_layers must be >= 1, not 0", None),
        ({"workers": 0}, InputError, "workers must be >= 1, not 0", None),
        ({"device": "tpu"}, InputError, "device='tpu' is not one eaglequant runs on", "--device 'tpu'"),
        ({"calib": "nope.safetensors"}, InputError, "calib='nope.safetensors': no such file", "--calib 'nope"),
        ({"repo_id": "not a repo"}, InputError, "repo_id='not a repo': 'not a repo' is not a Hub repo id", "--repo-id"),
    ],
)
def test_errors_name_the_parameter_and_the_cli_says_the_flag(
    settings: dict[str, object], error: type[Exception], library: str, cli: str | None
) -> None:
    with pytest.raises(error, match=re.escape(library)) as raised:
        ConversionOptions(**settings)  # type: ignore[arg-type]
    assert "--" not in str(raised.value).split(";")[0]
    if cli is not None:
        assert cli in raised.value.one_line(cli_wording)


def test_calibration_data_for_a_scheme_without_a_calibrated_scale_is_refused(tmp_path: Path) -> None:
    calib = tmp_path / "calib.safetensors"
    calib.write_bytes(b"")
    assert ConversionOptions(scheme="nvfp4", calib=calib).calib == calib
    with pytest.raises(InputError, match="scheme 'fp8-per-channel' has no calibrated activation scale"):
        ConversionOptions(calib=calib)


def test_every_option_is_a_convert_flag() -> None:
    """The CLI's convert takes every option (its flag named as errors name it to CLI users)."""
    usage = run_cli("convert", "-h").stdout
    for name in OPTION_NAMES:
        flag = cli_wording(switch(name))
        assert flag in usage, name


def test_convert_passes_on_every_option_under_its_flags_name() -> None:
    """convert's parameters are named as their flags, which is how its options reach the library unlisted."""
    import inspect

    from eaglequant.cli.convert_cmd import convert_command
    from eaglequant.cli.options import given_options
    from eaglequant.conversion.options import OPTION_SPECS

    parameters = set(inspect.signature(convert_command).parameters)
    assert {spec.flag.removeprefix("--").replace("-", "_") for spec in OPTION_SPECS.values()} <= parameters
    chosen = given_options({"engine": ["sglang"], "verify": True, "match_context": False, "scheme": "nvfp4"})
    assert chosen.engines == ("sglang",) and chosen.verify_output and chosen.resolved_scheme.name == "nvfp4"


def test_the_cli_and_the_library_refuse_alike() -> None:
    result = run_cli("inspect", FIXTURES / "specforge-llama", "--quantize", "re:(fc")
    assert result.exit_code == 2 and "--quantize 're:(fc' is not a valid regular expression" in result.stderr
