"""A format's config is one typed value (:class:`QuantConfig`), written by one writer and read by one reader: the
round trip holds for every fixture head in every built-in scheme and format that stores it, and for heads whose
linears are in different kinds; compressed-tensors' own parser reads the groups eaglequant writes."""

from __future__ import annotations

import pytest

from eaglequant import inspect
from eaglequant.common.errors import EagleQuantError
from eaglequant.formats import FORMATS, stored_cells
from eaglequant.formats.quant_config import ConfigGroup, QuantConfig
from eaglequant.kinds import KindPair
from tests.conftest import FIXTURE_NAMES, FIXTURES, require_vendor

FP8 = KindPair("fp8-channel", "fp8-token")
# (format, the MLP's scheme): per-module kinds in each format that stores them.
PER_MODULE = [("quark", "mxfp4"), ("compressed-tensors", "nvfp4"), ("compressed-tensors", "int4-w4a16"),
              ("modelopt", "nvfp4")]  # fmt: skip


def _round_trip(fmt_name: str, config: QuantConfig) -> QuantConfig:
    fmt = FORMATS[fmt_name]
    files = fmt.write_config(config)
    return fmt.read_config(files.quantization_config, files.side_files).config


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_every_plan_reads_back_as_written(fixture: str) -> None:
    planned = 0
    settings = [{"scheme": scheme, "format": fmt} for scheme, fmt in stored_cells()]
    settings += [
        {"scheme": "fp8-per-channel", "scheme_for": [f"mlp.*={mlp}"], "format": fmt, "target_layers": 61}
        for fmt, mlp in PER_MODULE
    ]
    for chosen in settings:
        try:
            plan = inspect(FIXTURES / fixture, **chosen).plan
        except EagleQuantError:
            continue  # a head this scheme cannot quantize: held by the refusal tests
        config = plan.config
        assert _round_trip(plan.format.name, config) == config, chosen
        planned += 1
    assert planned > len(stored_cells()) // 2


@pytest.mark.parametrize(("fmt", "mlp"), PER_MODULE)
def test_per_module_kinds_go_where_each_format_keeps_them(fmt: str, mlp: str) -> None:
    plan = inspect(FIXTURES / "specforge-llama", scheme="fp8-per-channel", scheme_for=[f"mlp.*={mlp}"], format=fmt,
                   target_layers=61).plan  # fmt: skip
    config = plan.config
    mlp_kinds = plan.scheme_of("layers.0.mlp.down_proj").kinds
    mlp_names = ("model.layers.61.mlp.down_proj", "model.layers.61.mlp.gate_up_proj")
    assert ConfigGroup(mlp_kinds, mlp_names) in config.groups
    written = FORMATS[fmt].write_config(config).quantization_config
    if fmt == "quark":
        assert sorted(written["layer_quant_config"]) == list(mlp_names)
        assert written["global_quant_config"]["weight"]["dtype"] == "fp8_e4m3"
    elif fmt == "compressed-tensors":
        groups = written["config_groups"]
        assert groups["FP8_DYNAMIC"]["targets"] == ["Linear"]
        assert [g["targets"] for g in groups.values() if g["targets"] != ["Linear"]] == [list(mlp_names)]
        formats = {group["format"] for group in groups.values()}
        assert written["format"] == (formats.pop() if len(formats) == 1 else "mixed-precision")
    else:
        assert written["quant_algo"] == "MIXED_PRECISION" and set(mlp_names) <= set(written["quantized_layers"])


def test_a_config_of_one_kind_is_one_default_group() -> None:
    nvfp4 = KindPair("nvfp4", None)
    assert QuantConfig.of({"a": nvfp4, "b": None}, ["b"], FP8) == QuantConfig.flat(nvfp4, ["b"])
    mixed = QuantConfig.of({"b": nvfp4, "a": FP8, "c": FP8}, [], FP8)
    assert mixed.groups == (ConfigGroup(FP8), ConfigGroup(nvfp4, ("b",)))
    listed = QuantConfig.of({"b": nvfp4, "a": FP8, "c": FP8}, [], FP8, default_group=False)
    assert listed.default is None and listed.kinds == FP8
    assert listed.kinds_for(("b",), str.__eq__) == nvfp4 and listed.kinds_for(("z",), str.__eq__) is None


@pytest.mark.vendor
def test_compressed_tensors_parses_the_groups_eaglequant_writes() -> None:
    require_vendor("compressed_tensors")
    from compressed_tensors.quantization import QuantizationConfig

    plan = inspect(FIXTURES / "specforge-llama", scheme="fp8-per-channel", scheme_for=["mlp.*=nvfp4"],
                   format="compressed-tensors", target_layers=61).plan  # fmt: skip
    written = plan.config_files().quantization_config
    parsed = QuantizationConfig.model_validate(written)
    assert parsed.format == "mixed-precision"
    targets = {name: group.targets for name, group in parsed.config_groups.items()}
    assert targets == {
        "FP8_DYNAMIC": ["Linear"],
        "NVFP4A16": ["model.layers.61.mlp.down_proj", "model.layers.61.mlp.gate_up_proj"],
    }
    assert parsed.config_groups["NVFP4A16"].format == "nvfp4-pack-quantized"
