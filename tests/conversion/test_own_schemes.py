"""fc and lm_head in schemes of their own: what is written (ModelOpt's MIXED_PRECISION, named as vLLM looks modules
up), read back, verified and refused. That vLLM's own loader runs each module as written is in
tests/engine_load/test_engine_load.py (test_vllm_loads_lm_head_in_a_scheme_of_its_own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglequant import convert, explain, verify
from eaglequant.common.errors import EXIT_BAD_INPUT, CheckpointError, EagleQuantError, InputError
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
    assert written.own_kinds == {"lm_head": load_scheme("nvfp4").without_calibration().kinds}
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
    assert any("not listed in quantized_layers" in problem for problem in problems)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"format": "compressed-tensors", "scheme_for": ["fc=nvfp4"]}, "cannot store linears of different kinds"),
        ({"format": "compressed-tensors"}, "scheme_for='lm_head' asks to quantize lm_head.*format='modelopt'"),
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
    [("lm_head", "not MODULE=SCHEME"), ("q_proj=nvfp4", "not MODULE=SCHEME"), ("lm_head=nvfp5", "unknown scheme")],
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


def test_a_config_that_mixes_the_decoders_kinds_is_refused(mixed: Path, tmp_path: Path) -> None:
    dst = tmp_path / "edited"
    shutil.copytree(mixed, dst)
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"]["quantized_layers"]["model.layers.61.mlp.down_proj"] = {"quant_algo": "NVFP4"}
    with pytest.raises(CheckpointError, match="decoder's linears different kinds"):
        get_format("modelopt").read_config(config["quantization_config"], {})


def test_the_head_is_held_to_the_loosest_thresholds() -> None:
    fp8, nvfp4 = load_scheme("fp8-per-channel"), load_scheme("nvfp4")
    limits = SchemeAssignment(fp8, {"lm_head": nvfp4}).head_thresholds()
    assert limits.max_mean_tv == max(fp8.verify.max_mean_tv, nvfp4.verify.max_mean_tv)
    assert limits.min_top1_agreement == min(fp8.verify.min_top1_agreement, nvfp4.verify.min_top1_agreement)
    assert SchemeAssignment(fp8).head_thresholds() == fp8.verify
