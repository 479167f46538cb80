"""Linears in schemes of their own (``scheme_for`` rules): which scheme each linear gets, what is written
(ModelOpt's MIXED_PRECISION, named as vLLM looks modules up), read back, verified and refused. That vLLM's own
loader runs each module as written is in tests/engine_load/test_engine_load.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglequant import convert, explain, inspect, verify
from eaglequant.common.errors import EXIT_BAD_INPUT, EagleQuantError, InputError
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.engines import get_engine
from eaglequant.engines.view import EngineView
from eaglequant.formats import get_format
from eaglequant.record.report import read_report
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import load_scheme
from tests.conftest import FIXTURES, run_cli

SOURCE = FIXTURES / "specforge-llama"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("own") / "mixed"
    convert(SOURCE, dst, scheme="fp8-per-channel", scheme_for=["lm_head=nvfp4"], format="modelopt", target_layers=61)
    return dst


def test_lm_head_is_listed_in_its_own_kind_under_vllms_runtime_names(mixed: Path) -> None:
    config = json.loads((mixed / "config.json").read_text())["quantization_config"]
    assert config["quant_algo"] == "MIXED_PRECISION" and config["ignore"] == ["model.fc"]
    assert config["quantized_layers"] == {
        "lm_head": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
        **{
            f"model.layers.61.{name}": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"}
            for name in ("mlp.down_proj", "mlp.gate_up_proj", "self_attn.o_proj", "self_attn.qkv_proj")
        },
    }
    nested = json.loads((mixed / "hf_quant_config.json").read_text())["quantization"]
    assert nested["quantized_layers"] == config["quantized_layers"] and nested["exclude_modules"] == ["model.fc"]


def test_a_mixed_checkpoint_reads_back_explains_and_verifies(mixed: Path) -> None:
    written = get_format("modelopt").read_config(
        json.loads((mixed / "config.json").read_text())["quantization_config"], {}
    )
    assert written.kinds == load_scheme("fp8-per-channel").kinds
    assert written.module_kinds["lm_head"] == load_scheme("nvfp4").without_calibration().kinds
    assert explain(mixed).ok
    report = verify(mixed, source=SOURCE)
    assert report.ok, report.structure
    assert {layer.module for layer in report.layers} >= {"lm_head", "midlayer.mlp.down_proj"}
    recorded = read_report(mixed)
    assert recorded is not None and set(recorded.own_schemes) == {"lm_head"}
    assert "| Scheme of `lm_head` | `nvfp4` |" in (mixed / "README.md").read_text()


def test_lm_head_in_nvfp4_reads_fewer_bytes_a_round_than_in_fp8(mixed: Path, tmp_path: Path) -> None:
    fp8 = convert(SOURCE, tmp_path / "fp8", scheme="fp8-per-channel", quantize=["lm_head"], format="modelopt")
    ours = read_report(mixed)
    assert ours is not None
    (theirs,), (mine,) = fp8.report().round_costs, ours.round_costs
    assert mine.part("lm_head").bytes_per_read < theirs.part("lm_head").bytes_per_read  # type: ignore[union-attr]
    assert mine.part("decoder").bytes_per_read == theirs.part("decoder").bytes_per_read  # type: ignore[union-attr]


def test_a_listed_name_for_another_target_is_caught(mixed: Path) -> None:
    problems = explain(mixed, target_layers=32).all_problems
    unlisted = [found.subject for found in problems if found.code == "stored-quantized"]
    assert unlisted and all(name.startswith("model.layers.32.") for name in unlisted)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"format": "compressed-tensors"}, "runs lm_head unquantized in compressed-tensors.*format='modelopt'"),
        ({"format": "fp8", "scheme": "fp8-block", "scheme_for": ["fc=nvfp4"]}, "format 'fp8' cannot store scheme"),
        ({"format": "quark"}, "format 'quark' cannot store scheme 'nvfp4'"),
        (
            {"format": "modelopt", "engines": ["trtllm-main"], "scheme_for": ["fc=nvfp4"]},
            r"TensorRT-LLM main \(2026\) does not read per-module",
        ),
        ({"format": "modelopt", "target_layers": None}, "needs the target's layer count"),
    ],
)
def test_what_cannot_be_written_or_served_is_refused(settings: dict, message: str, tmp_path: Path) -> None:
    chosen = {"scheme": "fp8-per-channel", "scheme_for": ["lm_head=nvfp4"], "target_layers": 61, **settings}
    with pytest.raises(InputError, match=message):
        convert(SOURCE, tmp_path / "out", **chosen)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("lm_head", "not PATTERN=SCHEME"),
        ("=nvfp4", "not PATTERN=SCHEME"),
        ("lm_head=nvfp5", "unknown scheme"),
        ("re:(=nvfp4", "not a valid regular expression"),
        ("q_proj=nvfp4", "this head has no q_proj of its own"),
        ("attn.*=nvfp4", "matches no linear"),
    ],
)
def test_a_bad_scheme_for_is_one_usage_line(entry: str, message: str, tmp_path: Path) -> None:
    result = run_cli("convert", SOURCE, tmp_path / "out", "--scheme-for", entry)
    assert result.exit_code == EXIT_BAD_INPUT and message in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # the line and its hint


def test_lm_head_in_the_decoders_kind_is_plain_quantization(tmp_path: Path) -> None:
    dst = tmp_path / "same"
    convert(SOURCE, dst, scheme="fp8-per-channel", scheme_for=["lm_head=fp8-per-channel"], format="modelopt")
    config = json.loads((dst / "config.json").read_text())["quantization_config"]
    assert config["quant_algo"] == "FP8_PER_CHANNEL_PER_TOKEN" and "lm_head" not in config["ignore"]


def test_a_head_without_its_own_lm_head_is_refused(tmp_path: Path) -> None:
    shared = next(p for p in sorted(FIXTURES.iterdir()) if p.is_dir() and _shares_lm_head(p))
    with pytest.raises(InputError, match="has no lm_head of its own"):
        convert(shared, tmp_path / "out", scheme="fp8-per-channel", scheme_for=["lm_head=nvfp4"], format="modelopt")


def _shares_lm_head(path: Path) -> bool:
    from eaglequant import inspect

    try:
        return "lm_head" not in {lin.module for lin in inspect(path).head.linears}
    except EagleQuantError:  # a fixture folder that holds no head of its own (a target and draft pair)
        return False


def test_the_head_is_held_to_the_loosest_thresholds() -> None:
    fp8, nvfp4 = load_scheme("fp8-per-channel"), load_scheme("nvfp4")
    limits = SchemeAssignment.per_module(fp8, {"lm_head": nvfp4}).head_thresholds()
    assert limits.max_mean_tv == max(fp8.verify.max_mean_tv, nvfp4.verify.max_mean_tv)
    assert limits.min_top1_agreement == min(fp8.verify.min_top1_agreement, nvfp4.verify.min_top1_agreement)
    assert SchemeAssignment(fp8).head_thresholds() == fp8.verify


def _plan(*rules: str, scheme: str = "fp8-per-channel") -> ConversionPlan:
    from eaglequant.conversion.options import ConversionOptions
    from eaglequant.conversion.plan import build_plan
    from eaglequant.conversion.request import ConversionRequest

    options = ConversionOptions(scheme=scheme, scheme_for=rules, format="modelopt", target_layers=61)
    head = inspect(SOURCE).head
    return build_plan(head, ConversionRequest.of(options, head.config))


def test_rules_give_decoder_linears_their_own_scheme_the_first_match_deciding() -> None:
    plan = _plan("self_attn.*=fp8-per-channel", "mlp.*=nvfp4", "midlayer.mlp.down_proj=fp8-per-channel")
    schemes = {lin.checkpoint_module: plan.assignment.of(lin.module).name for lin in plan.head.linears}
    assert schemes == {
        "fc": "fp8-per-channel",
        "lm_head": "fp8-per-channel",
        **{f"midlayer.self_attn.{p}_proj": "fp8-per-channel" for p in "qkvo"},
        **{f"midlayer.mlp.{p}_proj": "nvfp4" for p in ("gate", "up", "down")},
    }
    assert plan.assignment.mixed and {lin.checkpoint_module for lin in plan.quantized} >= {"midlayer.mlp.down_proj"}


def test_fused_linears_given_different_kinds_are_refused_naming_the_group() -> None:
    with pytest.raises(InputError) as caught:
        _plan("re:.*\\.q_proj=nvfp4")
    message = str(caught.value).splitlines()[0]
    assert "qkv_proj (layers.0.self_attn.qkv_proj)" in message
    assert "midlayer.self_attn.q_proj nvfp4, midlayer.self_attn.k_proj fp8-per-channel" in message


def test_a_fused_group_refusal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_cli("convert", SOURCE, tmp_path / "out", "--format", "modelopt", "--target-layers", "61",
                     "--scheme-for", "mlp.gate_proj=nvfp4")  # fmt: skip
    assert result.exit_code == EXIT_BAD_INPUT and "gate_up_proj" in result.stderr
    assert "midlayer.mlp.up_proj fp8-per-channel" in result.stderr and not (tmp_path / "out").exists()


def test_each_engine_module_is_judged_in_its_own_kinds() -> None:
    plan = _plan("mlp.*=nvfp4")
    fp8, nvfp4 = load_scheme("fp8-per-channel").kinds, load_scheme("nvfp4").without_calibration().kinds
    view = EngineView.of(
        get_engine("vllm"), plan.head, get_format("modelopt"), fp8, 61, {"layers.0.mlp.down_proj": nvfp4}
    )
    kinds = {module.names[0]: view.kinds_of(module) for module in view.modules()}
    assert kinds["model.layers.61.mlp.down_proj"] == nvfp4 and kinds["model.layers.61.self_attn.o_proj"] == fp8
    written = plan.config_files().quantization_config
    assert written["quant_algo"] == "MIXED_PRECISION"
    assert written["quantized_layers"]["model.layers.61.mlp.gate_up_proj"] == {
        "quant_algo": "W4A16_NVFP4",
        "group_size": 16,
    }
    assert written["quantized_layers"]["model.layers.61.self_attn.qkv_proj"] == {
        "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"
    }


def test_modules_sharing_one_kind_get_the_single_scheme_form() -> None:
    from eaglequant.formats.quant_config import QuantConfig

    nvfp4, fp8 = load_scheme("nvfp4").without_calibration().kinds, load_scheme("fp8-per-channel").kinds
    fmt = get_format("modelopt")
    assert QuantConfig.of({"a": nvfp4, "b": None}, ["b"], fp8, default_group=False) == QuantConfig.flat(nvfp4, ["b"])
    mixed = fmt.write_config(QuantConfig.of({"a": nvfp4, "b": fp8}, [], fp8, default_group=False)).quantization_config
    assert mixed["quant_algo"] == "MIXED_PRECISION" and set(mixed["quantized_layers"]) == {"a", "b"}
