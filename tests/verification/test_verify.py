"""``verify``: passes on every fixture conversion, fails naming the module on each kind of damage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglequant import convert, verify
from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_NOT_VERIFIED
from eaglequant.common.findings import find
from tests.conftest import FIXTURE_NAMES, FIXTURES, run_cli, run_cli_subprocess

SCHEMES = [("fp8-per-channel", "quark"), ("nvfp4", "compressed-tensors"), ("mxfp4", "quark")]


class Verified:
    """``convert --verify`` of (fixture, scheme), each made on first use: the damage tests need a few, and only the
    sweep over every fixture needs them all."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.results: dict[tuple[str, str], Any] = {}

    def __getitem__(self, key: tuple[str, str]) -> Any:
        if key not in self.results:
            fixture, scheme = key
            fmt = dict(SCHEMES)[scheme]
            dst = self.out / f"{fixture}-{scheme}"
            self.results[key] = convert(FIXTURES / fixture, dst, scheme=scheme, format=fmt, verify_output=True)
        return self.results[key]

    def items(self) -> list[tuple[tuple[str, str], Any]]:
        return [(key, self[key]) for key in ((f, s) for f in FIXTURE_NAMES for s, _ in SCHEMES)]


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return Verified(tmp_path_factory.mktemp("verify"))


@pytest.mark.slow
def test_verify_passes_on_every_fixture_conversion(verified) -> None:
    for (fixture, scheme), result in verified.items():
        report = result.verification
        assert report.ok, (fixture, scheme, report.problems)
        assert {layer.module for layer in report.layers} == {lin.checkpoint_module for lin in result.plan.quantized}
        assert all(layer.backend == ("triton" if torch.cuda.is_available() else "reference") for layer in report.layers)
        stored = json.loads((result.destination / "eaglequant_verify.json").read_text())
        assert stored["ok"] and stored["scheme"] == scheme
        if "lm_head" in {lin.module for lin in result.plan.head.linears}:
            assert report.fidelity.top1_agreement is not None


def test_thresholds_come_from_the_scheme_file(verified) -> None:
    report = verified[("specforge-llama", "fp8-per-channel")].verification
    assert report.to_json()["thresholds"]["min_sqnr_db"] == 25.0
    assert all(layer.sqnr_db > 25.0 for layer in report.layers)


def _damaged(verified, tmp_path: Path, fixture: str, scheme: str, damage) -> Path:
    src = verified[(fixture, scheme)].destination
    dst = shutil.copytree(src, tmp_path / "damaged")
    path = next(dst.glob("*.safetensors"))
    tensors = load_file(path)
    damage(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    return dst


def test_flipped_scale_byte_fails_naming_the_module(verified, tmp_path: Path) -> None:
    def flip(tensors):
        scale = tensors["midlayer.self_attn.o_proj.weight_scale"]
        raw = scale.view(torch.uint8).reshape(-1)
        raw[3] ^= 0x40  # the exponent byte of the first float32 scale
        tensors["midlayer.self_attn.o_proj.weight_scale"] = raw.view(torch.float32).reshape(scale.shape)

    report = verify(_damaged(verified, tmp_path, "specforge-llama", "fp8-per-channel", flip))
    assert not report.ok
    failed = [layer.module for layer in report.layers if layer.failed]
    assert failed == ["midlayer.self_attn.o_proj"]
    changed = find(report.problems, "sha256-differs")
    assert changed is not None and changed.subject == "model.safetensors"


def test_missing_scale_fails(verified, tmp_path: Path) -> None:
    dst = _damaged(
        verified, tmp_path, "specforge-llama", "nvfp4", lambda t: t.pop("midlayer.mlp.down_proj.weight_scale")
    )
    missing = find(verify(dst).problems, "missing")
    assert missing is not None and missing.subject == "midlayer.mlp.down_proj.weight_scale"


def test_stray_tensor_fails(verified, tmp_path: Path) -> None:
    def stray(tensors):
        tensors["midlayer.mlp.up_proj.input_global_scale"] = torch.ones(1)

    stored = find(verify(_damaged(verified, tmp_path, "specforge-llama", "nvfp4", stray)).problems, "not-expected")
    assert stored is not None and stored.subject == "midlayer.mlp.up_proj.input_global_scale"


def test_mismatched_fused_scale_fails(verified, tmp_path: Path) -> None:
    def unshare(tensors):
        tensors["midlayer.self_attn.k_proj.weight_global_scale"] *= 2

    problems = verify(_damaged(verified, tmp_path, "specforge-llama", "nvfp4", unshare)).problems
    unshared = find(problems, "fused-scales-differ")
    assert unshared is not None and unshared.subject == "layers.0.self_attn.qkv_proj"


def test_nan_scale_fails(verified, tmp_path: Path) -> None:
    def nan(tensors):
        tensors["midlayer.mlp.gate_proj.weight_scale"][0, 0] = 255  # E8M0 NaN

    invalid = find(verify(_damaged(verified, tmp_path, "specforge-llama", "mxfp4", nan)).problems, "invalid-scale")
    assert invalid is not None and invalid.subject == "midlayer.mlp.gate_proj.weight_scale"


def test_without_source_parity_is_skipped_and_said(verified, tmp_path: Path) -> None:
    dst = shutil.copytree(verified[("torchspec-mla", "fp8-per-channel")].destination, tmp_path / "moved")
    report_file = dst / "eaglequant_report.json"
    report = json.loads(report_file.read_text())
    report["source"] = str(tmp_path / "gone")
    report_file.write_text(json.dumps(report))
    result = verify(dst)
    assert not result.layers and find(result.notes, "no-source") is not None
    assert result.verdict == "not verified numerically" and not result.numerical
    # It must never claim numerical checks passed: its own exit code, ok false in JSON, no "ok:" line.
    cli = run_cli("verify", dst, "--json")
    data = json.loads(cli.stdout)
    assert cli.exit_code == EXIT_NOT_VERIFIED and data["ok"] is False
    assert data["verdict"] == "not verified numerically" and "parity" not in data["checks"]
    human = run_cli("verify", dst)
    assert human.exit_code == EXIT_NOT_VERIFIED and "not verified numerically" in human.stdout
    assert "ok:" not in human.stdout and "upload` refuses it" in human.stdout


@pytest.mark.slow
def test_verify_cli_exit_codes(verified, tmp_path: Path) -> None:
    good = verified[("modelopt-mla", "fp8-per-channel")].destination
    result = run_cli("verify", good, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"]

    def zero(tensors):
        tensors["midlayer.mlp.down_proj.weight_scale"] = torch.zeros_like(
            tensors["midlayer.mlp.down_proj.weight_scale"]
        )

    damaged = _damaged(verified, tmp_path, "specforge-llama", "fp8-per-channel", zero)
    result = run_cli("verify", damaged)
    assert result.exit_code == EXIT_CHECK_FAILED
    assert "midlayer.mlp.down_proj.weight_scale" in result.stdout and "Traceback" not in result.stderr
    # The command ends without Python's teardown once torch is loaded: its exit code and output must survive that.
    process = run_cli_subprocess("verify", damaged)
    assert process.returncode == EXIT_CHECK_FAILED, process.stderr
    assert "midlayer.mlp.down_proj.weight_scale" in process.stdout and process.stdout.endswith("\n")


def test_convert_verify_cli_stores_the_report(tmp_path: Path) -> None:
    result = run_cli("convert", FIXTURES / "eagle31-fc-norm", tmp_path / "out", "--verify", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["verification"]["ok"] and (tmp_path / "out" / "eaglequant_verify.json").is_file()


def test_verify_against_the_unpruned_source_works_and_names_the_pruned_one(tmp_path: Path) -> None:
    """Issue 55, item 4: ``verify --source ORIGINAL`` (the unpruned head a pruned DST came from) works as
    ``accept --source ORIGINAL`` does: parity and fidelity run against the pruned head DST's report records, and
    the note says so; with that head gone, they do not run, and the note says that (issue 48, item 1 refused it)."""
    import shutil

    import eaglequant

    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([(t * 37) % 512 for t in range(512)]))
    source = FIXTURES / "specforge-llama"
    pruned = eaglequant.prune(source, tmp_path / "dst-vocab64-bf16", size=64, counts=counts).destination
    convert(pruned, tmp_path / "dst", scheme="fp8-per-channel", format="modelopt")
    result = run_cli("verify", tmp_path / "dst", "--source", source, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    notes = {note["code"]: note["message"] for note in data["notes"]}
    assert "parity" in data["checks"] and str(pruned) in notes["source-vocabulary-differs"]
    shutil.rmtree(pruned)
    gone = run_cli("verify", tmp_path / "dst", "--source", source, "--json")
    assert gone.exit_code == 5, gone.stderr
    gone_notes = {note["code"]: note["message"] for note in json.loads(gone.stdout)["notes"]}
    assert "parity and fidelity did not run" in gone_notes["source-vocabulary-differs"]
