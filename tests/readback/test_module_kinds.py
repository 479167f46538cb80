"""A checkpoint whose decoder linears are stored in different kinds (``--scheme-for 'mlp.*=nvfp4'`` under ModelOpt's
MIXED_PRECISION): read back with each linear in its own kinds, explained and verified module by module, and recorded
in the report and the card with each module's scheme. That vLLM's own loader loads it as planned is in
tests/engine_load/test_engine_load.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant import convert, explain, inspect, verify
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.kinds import kinds_title
from eaglequant.readback.explanation import read_written_config
from eaglequant.readback.module_kinds import linear_kinds
from eaglequant.readback.written_head import describe_written_head
from eaglequant.record.report import read_report
from eaglequant.record.schemes import checkpoint_schemes
from eaglequant.schemes.model import load_scheme
from tests.conftest import FIXTURES, run_cli

SOURCE = FIXTURES / "specforge-llama"
FP8 = load_scheme("fp8-per-channel").kinds
NVFP4 = load_scheme("nvfp4").without_calibration().kinds
MLP = ("gate_proj", "up_proj", "down_proj")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@pytest.fixture(scope="module")
def mlp_nvfp4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("decoder-kinds") / "mixed"
    convert(SOURCE, dst, scheme="fp8-per-channel", scheme_for=["mlp.*=nvfp4"], format="modelopt", target_layers=61)
    return dst


def _expected_kinds(layer: int = 0) -> dict[str, tuple[str, str | None]]:
    return {
        **{f"layers.{layer}.mlp.{name}": NVFP4 for name in MLP},
        **{f"layers.{layer}.self_attn.{name}": FP8 for name in ATTENTION},
    }


def test_each_decoder_linear_reads_back_in_its_own_kinds(mlp_nvfp4: Path) -> None:
    with Checkpoint.open(mlp_nvfp4) as checkpoint:
        _, written = read_written_config(checkpoint)
        head = describe_written_head(checkpoint)
    assert written.module_kinds["model.layers.61.mlp.gate_up_proj"] == NVFP4
    assert written.module_kinds["model.layers.61.self_attn.qkv_proj"] == FP8
    assert linear_kinds(written, head) == _expected_kinds()
    source = {lin.module: (lin.out_features, lin.in_features, lin.dtype) for lin in inspect(SOURCE).head.linears}
    assert {lin.module: (lin.out_features, lin.in_features, lin.dtype) for lin in head.linears} == source


def test_each_runtime_module_is_explained_in_its_own_kinds(mlp_nvfp4: Path) -> None:
    explanation = explain(mlp_nvfp4, engines=["vllm"])
    assert explanation.ok, explanation.all_problems
    (vllm,) = explanation.engines
    schemes = {module.runtime_name: module.scheme for module in vllm.modules}
    assert schemes["model.layers.61.mlp.gate_up_proj"] == kinds_title(NVFP4)
    assert schemes["model.layers.61.mlp.down_proj"] == kinds_title(NVFP4)
    assert schemes["model.layers.61.self_attn.qkv_proj"] == kinds_title(FP8)
    assert schemes["model.layers.61.self_attn.o_proj"] == kinds_title(FP8)
    assert run_cli("explain", mlp_nvfp4).exit_code == 0


def test_the_layer_count_is_found_from_the_listed_names(tmp_path: Path) -> None:
    """A two-layer draft with only its second layer's MLP in NVFP4: layer 1's names (model.layers.33.*) map to the
    draft's layer 1, not to layer 0 of a 33-layer target."""
    dst = tmp_path / "second-mlp"
    convert(
        FIXTURES / "multi-layer",
        dst,
        scheme="fp8-per-channel",
        scheme_for=["layers.1.mlp.*=nvfp4"],
        format="modelopt",
        target_layers=32,
    )
    with Checkpoint.open(dst) as checkpoint:
        _, written = read_written_config(checkpoint)
        kinds = linear_kinds(written, describe_written_head(checkpoint))
    assert kinds == {**_expected_kinds(0), **{f"layers.0.mlp.{name}": FP8 for name in MLP}, **_expected_kinds(1)}


def test_verify_holds_each_linear_to_its_own_scheme(mlp_nvfp4: Path) -> None:
    report = verify(mlp_nvfp4, source=SOURCE)
    assert report.ok, report.problems
    with Checkpoint.open(mlp_nvfp4) as checkpoint:  # the assignment verify reads, as its report records it
        schemes, _ = checkpoint_schemes(checkpoint, read_report(mlp_nvfp4))
    assert (report.scheme_label, report.thresholds) == (schemes.label, schemes.head_thresholds())
    assert {name: schemes.of(name).name for name in _expected_kinds()} == {
        **{f"layers.0.mlp.{name}": "nvfp4" for name in MLP},
        **{f"layers.0.self_attn.{name}": "fp8-per-channel" for name in ATTENTION},
    }
    recorded = report.to_json()
    assert recorded["scheme"] == "fp8-per-channel" and recorded["scheme_label"] == "W8A8 + W4A16"
    looser = load_scheme("nvfp4").verify
    assert (
        recorded["thresholds"]["min_sqnr_db"] == looser.min_sqnr_db < load_scheme("fp8-per-channel").verify.min_sqnr_db
    )
    assert run_cli("verify", mlp_nvfp4, "--source", SOURCE).exit_code == 0


def test_the_report_and_card_name_each_modules_scheme(mlp_nvfp4: Path) -> None:
    recorded = read_report(mlp_nvfp4)
    assert recorded is not None
    assert recorded.algorithm == "MIXED_PRECISION" and recorded.scheme_label == "W8A8 + W4A16"
    assert set(recorded.own_schemes) == {f"layers.0.mlp.{name}" for name in MLP}
    card = (mlp_nvfp4 / "README.md").read_text()
    assert "| module | scheme | shape |" in card and "(`MIXED_PRECISION`)" in card
    assert "| `midlayer.mlp.down_proj` | `nvfp4` |" in card
    assert "| `midlayer.self_attn.q_proj` | `fp8-per-channel` |" in card


def test_a_single_scheme_card_has_no_scheme_column(tmp_path: Path) -> None:
    dst = tmp_path / "plain"
    convert(SOURCE, dst, scheme="fp8-per-channel", scheme_for=["lm_head=fp8-per-channel"], format="modelopt")
    recorded = read_report(dst)
    assert recorded is not None and recorded.own_schemes  # lm_head's own scheme, in the decoder's kinds
    assert recorded.algorithm == "FP8_PER_CHANNEL_PER_TOKEN" and recorded.scheme_label == "W8A8"
    assert "| module | shape |" in (dst / "README.md").read_text()
