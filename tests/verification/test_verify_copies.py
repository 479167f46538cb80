"""``verify --source`` proves the file the engine loads: the tensors the conversion copied, byte for byte, and the
config fields the engine builds the draft from, against the source's; and the fidelity run uses DST's own copied
tensors and config, comparing top-1 proposals in target vocabulary ids through each checkpoint's own d2t.

Each planted fault must fail verify with seeded synthetic inputs and with captured inputs (``--inputs``), with the
report's file digests updated or deleted (as a buggy tool or an attacker would leave them), so that the new checks,
not the SHA-256 check, are what catch it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglequant import convert, verify
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_NOT_VERIFIED
from eaglequant.common.findings import codes, find
from eaglequant.layouts.detect import describe_head
from eaglequant.verification.copies import compare_copies
from eaglequant.verification.fidelity import distribution_shift, target_ids
from eaglequant.verification.verify import VerifyReport
from tests.conftest import FIXTURES, run_cli

LLAMA_FP8 = ("specforge-llama", "fp8-per-channel", "quark")
LLAMA_NVFP4 = ("specforge-llama", "nvfp4", "compressed-tensors")
SPECULATORS = ("speculators-llama", "nvfp4", "compressed-tensors")
MLA = ("torchspec-mla", "fp8-per-channel", "modelopt")
BIN = ("eagle-original-bin", "fp8-per-channel", "quark")
KEYS = (LLAMA_FP8, LLAMA_NVFP4, SPECULATORS, MLA, BIN)
COPY_CODES = {"copy-missing", "not-in-source", "dtype-differs", "shape-differs", "values-differ", "config-differs"}

Damage = Callable[[dict[str, torch.Tensor]], None]
ConfigDamage = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Path]:
    out = tmp_path_factory.mktemp("copies")
    return {
        key: convert(FIXTURES / key[0], out / "-".join(key), scheme=key[1], format=key[2]).destination for key in KEYS
    }


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Captured draft inputs (the --calib file format) for each fixture: two sequences of 48 positions."""
    out = tmp_path_factory.mktemp("inputs")
    files = {}
    for fixture in {key[0] for key in KEYS}:
        with Checkpoint.open(FIXTURES / fixture) as checkpoint:
            head = describe_head(checkpoint)
        dims = head.dims
        generator = torch.Generator().manual_seed(11)
        width = dims.num_aux_hidden_states * dims.target_hidden_size
        tensors = {"hidden_states": torch.randn(2, 48, width, generator=generator) * 4}
        vocab = next((t.info.shape[0] for t in head.tensors if t.module == "embed_tokens"), None)
        if vocab is None:
            tensors["input_embeds"] = torch.randn(2, 48, dims.hidden_size, generator=generator) * 0.02
        else:
            tensors["input_ids"] = torch.randint(0, vocab, (2, 48), generator=generator)
        files[fixture] = out / f"{fixture}.safetensors"
        save_file(tensors, files[fixture])
    return files


def _plant(
    converted: dict[tuple[str, str, str], Path],
    tmp_path: Path,
    key: tuple[str, str, str],
    tensors: Damage | None = None,
    config: ConfigDamage | None = None,
    digests: str = "updated",
) -> Path:
    """A copy of the conversion of ``key`` with one thing changed; ``digests``: what becomes of the report's
    SHA-256 of every file: "updated" to the changed files, "deleted", or "kept" (the hash check then fails too)."""
    dst = Path(shutil.copytree(converted[key], tmp_path / "planted"))
    if tensors is not None:
        path = dst / "model.safetensors"
        loaded = load_file(path)
        tensors(loaded)
        save_file(loaded, path, metadata={"format": "pt"})
    if config is not None:
        values = json.loads((dst / "config.json").read_text())
        config(values)
        (dst / "config.json").write_text(json.dumps(values, indent=2) + "\n")
    report_path = dst / "eaglequant_report.json"
    report = json.loads(report_path.read_text())
    if digests == "updated":
        report["files"] = {name: hashlib.sha256((dst / name).read_bytes()).hexdigest() for name in report["files"]}
    elif digests == "deleted":
        report["files"] = {}
    report_path.write_text(json.dumps(report))
    return dst


def _fails_with(
    dst: Path, key: tuple[str, str, str], captured: dict[str, Path], code: str, subject: str
) -> list[VerifyReport]:
    """verify against the source, with synthetic and with captured inputs: it fails, with a problem of ``code``
    about ``subject`` (a tensor, or a config.json key's dotted path), the SHA-256 check having nothing to say."""
    reports = []
    for inputs in (None, captured[key[0]]):
        report = verify(dst, source=FIXTURES / key[0], inputs=inputs, max_draft_tokens=3)
        assert report.verdict == "failed", (inputs, report.problems)
        assert (code, subject) in {(found.code, found.subject) for found in report.problems}, report.problems
        assert "sha256-differs" not in codes(report.problems), report.problems
        reports.append(report)
    return reports


def _copy_problems(report: VerifyReport) -> list[str]:
    return [p for p in report.problems if p.code in COPY_CODES]


@pytest.mark.parametrize(
    "key", [pytest.param(k, id="-".join(k), marks=() if k == LLAMA_FP8 else pytest.mark.slow) for k in KEYS]
)
def test_untouched_conversions_pass_with_every_copy_identical(converted, captured, key) -> None:  # type: ignore[no-untyped-def]
    for inputs in (None, captured[key[0]]):
        report = verify(converted[key], source=FIXTURES / key[0], inputs=inputs, max_draft_tokens=3)
        assert report.verdict == "passed" and not _copy_problems(report), report.problems
        assert report.copies is not None and report.copies.compared
        assert report.copies.identical == report.copies.compared  # counts: every tensor compared is identical


def test_a_quantized_lm_head_is_not_compared(tmp_path: Path) -> None:
    result = convert(FIXTURES / "specforge-llama", tmp_path / "out", format="modelopt", quantize=["lm_head"])
    report = verify(result.destination, source=FIXTURES / "specforge-llama")
    assert report.verdict == "passed", report.problems
    assert any(layer.module == "lm_head" for layer in report.layers)
    assert report.copies is not None
    assert report.copies.identical == report.copies.compared == 8 and report.copies.parity_checked == 8
    with Checkpoint.open(result.destination) as dst, Checkpoint.open(FIXTURES / "specforge-llama") as src:
        compared = compare_copies(dst, src, set())  # the tensors the report counts: a scale marks lm_head quantized
    assert "lm_head.weight" not in compared.compared and len(compared.compared) == 8


def test_shifted_d2t_fails(converted, captured, tmp_path: Path) -> None:
    def shift(tensors: dict[str, torch.Tensor]) -> None:
        tensors["d2t"][:200] += 1  # each of the first 200 draft ids proposes the next target token

    dst = _plant(converted, tmp_path, LLAMA_FP8, shift)
    synthetic, _ = _fails_with(dst, LLAMA_FP8, captured, "values-differ", "d2t")
    # the fidelity run maps both drafts' arg-max through their own d2t: the shifted proposals are flips
    assert synthetic.fidelity is not None and synthetic.fidelity.failed
    assert synthetic.fidelity.failed[0].startswith("top-1 agreement")


@pytest.mark.slow
def test_scaled_norm_fails(converted, captured, tmp_path: Path) -> None:
    def scale(tensors: dict[str, torch.Tensor]) -> None:
        tensors["midlayer.hidden_norm.weight"] = tensors["midlayer.hidden_norm.weight"] * 1.5

    dst = _plant(converted, tmp_path, LLAMA_NVFP4, scale)
    _fails_with(dst, LLAMA_NVFP4, captured, "values-differ", "midlayer.hidden_norm.weight")


@pytest.mark.slow
def test_changed_embedding_rows_fail(converted, captured, tmp_path: Path) -> None:
    def change(tensors: dict[str, torch.Tensor]) -> None:
        tensors["embed_tokens.weight"][10:20] += 0.5

    dst = _plant(converted, tmp_path, MLA, change)
    _fails_with(dst, MLA, captured, "values-differ", "embed_tokens.weight")


@pytest.mark.slow
def test_changed_aux_hidden_state_layer_ids_fail(converted, captured, tmp_path: Path) -> None:
    def change(config: dict[str, Any]) -> None:
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 29, 57]

    dst = _plant(converted, tmp_path, LLAMA_FP8, config=change)
    _fails_with(dst, LLAMA_FP8, captured, "config-differs", "eagle_config.eagle_aux_hidden_state_layer_ids")


@pytest.mark.slow
def test_speculators_aux_hidden_state_layer_ids_fail(converted, captured, tmp_path: Path) -> None:
    def change(config: dict[str, Any]) -> None:
        config["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]

    dst = _plant(converted, tmp_path, SPECULATORS, config=change)
    _fails_with(dst, SPECULATORS, captured, "config-differs", "eagle_aux_hidden_state_layer_ids")


@pytest.mark.slow
def test_changed_rope_theta_fails(converted, captured, tmp_path: Path) -> None:
    dst = _plant(converted, tmp_path, MLA, config=lambda config: config.update(rope_theta=100000.0))
    _fails_with(dst, MLA, captured, "config-differs", "rope_theta")


@pytest.mark.slow
def test_changed_speculators_rope_theta_fails(converted, captured, tmp_path: Path) -> None:
    def change(config: dict[str, Any]) -> None:
        config["transformer_layer_config"]["rope_theta"] = 10000.0

    dst = _plant(converted, tmp_path, SPECULATORS, config=change)
    _fails_with(dst, SPECULATORS, captured, "config-differs", "transformer_layer_config.rope_theta")


@pytest.mark.slow
def test_flipped_t2d_fails_with_the_digests_deleted(converted, captured, tmp_path: Path) -> None:
    def flip(tensors: dict[str, torch.Tensor]) -> None:
        tensors["t2d"] = ~tensors["t2d"]

    dst = _plant(converted, tmp_path, LLAMA_FP8, flip, digests="deleted")
    _fails_with(dst, LLAMA_FP8, captured, "values-differ", "t2d")


@pytest.mark.slow
def test_a_dropped_copy_fails(converted, captured, tmp_path: Path) -> None:
    dst = _plant(converted, tmp_path, SPECULATORS, lambda tensors: tensors.pop("t2d"))
    _fails_with(dst, SPECULATORS, captured, "copy-missing", "t2d")


@pytest.mark.slow
def test_a_retyped_copy_fails(converted, captured, tmp_path: Path) -> None:
    def widen(tensors: dict[str, torch.Tensor]) -> None:
        tensors["lm_head.weight"] = tensors["lm_head.weight"].to(torch.float32)

    dst = _plant(converted, tmp_path, LLAMA_FP8, widen)
    _fails_with(dst, LLAMA_FP8, captured, "dtype-differs", "lm_head.weight")


@pytest.mark.slow
def test_a_tensor_the_source_lacks_fails(converted, captured, tmp_path: Path) -> None:
    dst = _plant(converted, tmp_path, MLA, lambda tensors: tensors.update({"lm_head.bias": torch.zeros(512)}))
    _fails_with(dst, MLA, captured, "not-in-source", "lm_head.bias")


def test_the_fidelity_run_reads_dst_own_kept_tensors(converted, tmp_path: Path) -> None:
    """A damaged unquantized lm_head in DST moves the quantized draft's distributions (it once read the source's)."""
    dst = _plant(converted, tmp_path, LLAMA_FP8, lambda tensors: tensors["lm_head.weight"].neg_())
    report = verify(dst, source=FIXTURES / LLAMA_FP8[0])
    assert report.fidelity is not None and report.fidelity.shift is not None
    assert report.fidelity.shift.top1_agreement == 0.0 and any(f.startswith("mean TV") for f in report.fidelity.failed)


@pytest.mark.slow
def test_the_fidelity_run_reads_dst_own_config(converted, tmp_path: Path) -> None:
    clean = verify(converted[MLA], source=FIXTURES / MLA[0])
    dst = _plant(converted, tmp_path, MLA, config=lambda config: config.update(rms_norm_eps=10.0))
    changed = verify(dst, source=FIXTURES / MLA[0])
    assert clean.fidelity is not None and changed.fidelity is not None
    assert clean.fidelity.shift is not None and changed.fidelity.shift is not None
    assert changed.fidelity.shift.mean_tv > 10 * clean.fidelity.shift.mean_tv
    differs = find(changed.problems, "config-differs")
    assert differs is not None and differs.subject == "rms_norm_eps"


def test_top1_is_compared_in_target_ids() -> None:
    d2t = torch.tensor([0, 0, 5, 5])
    assert target_ids(torch.tensor([0, 2, 3]), d2t).tolist() == [0, 7, 8]
    assert target_ids(torch.tensor([0, 9]), d2t).tolist() == [0, -1]  # past the map: no target token
    assert target_ids(torch.tensor([1, 2]), None).tolist() == [1, 2]
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert distribution_shift(logits, logits, vocab_maps=(d2t, d2t)).flips == 0
    shifted = d2t + 1
    assert distribution_shift(logits, logits, vocab_maps=(d2t, shifted)).flips == 6


def test_cli_shows_the_problem_and_exits_3(converted, tmp_path: Path) -> None:
    def shift(tensors: dict[str, torch.Tensor]) -> None:
        tensors["d2t"][:200] += 1

    dst = _plant(converted, tmp_path, LLAMA_FP8, shift, digests="kept")
    result = run_cli("verify", dst, "--source", FIXTURES / LLAMA_FP8[0])
    assert result.exit_code == EXIT_CHECK_FAILED, result.stdout + result.stderr
    assert "problem: d2t: 200 of 256 values differ from the source's d2t" in result.stdout
    assert "model.safetensors: SHA-256 differs" in result.stdout  # the digests kept: the hash check fails too
    data = json.loads(run_cli("verify", dst, "--source", FIXTURES / LLAMA_FP8[0], "--json").stdout)
    message = "d2t: 200 of 256 values differ from the source's d2t"
    assert {"code": "values-differ", "subject": "d2t", "message": message} in data["structure"]  # with its code


def test_without_a_source_copies_are_not_compared_and_it_says_so(converted, tmp_path: Path) -> None:
    dst = _plant(converted, tmp_path, LLAMA_FP8, lambda tensors: tensors["d2t"].add_(1))
    report_path = dst / "eaglequant_report.json"
    report = json.loads(report_path.read_text())
    report["source"] = str(tmp_path / "gone")
    report_path.write_text(json.dumps(report))
    result = verify(dst)
    assert result.verdict == "not verified numerically" and not _copy_problems(result)
    assert find(result.notes, "copies-not-compared") is not None
    assert run_cli("verify", dst).exit_code == EXIT_NOT_VERIFIED
