"""Verification without false failures, and every planted fault caught by the numbers alone.

Correct conversions of every fixture in every (scheme, format) must pass verify over several seeds (the long
sweep, 20 seeds and Kimi-shaped heads, is ``scripts/verify_sweep.py``). Each planted fault must fail verify,
with the report's file hashes updated, so that the numerical and structural checks, not the hash check,
catch it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglequant import convert, verify
from eaglequant.common.findings import codes
from eaglequant.formats import stored_cells
from eaglequant.schemes.model import load_scheme
from eaglequant.verification.fidelity import DistributionShift, distribution_shift, judge_shift
from tests.conftest import (
    FIXTURE_NAMES,
    FIXTURES,
    TARGET_LAYERS,
    run_cli,
    run_cli_subprocess,
    stores_something,
    write_calibration,
)

CELLS = stored_cells()
SEEDS = (0, 1)


class Converted:
    """(fixture, scheme, format) -> its conversion, made on first use: a planted fault needs one, the sweep all."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.made: dict[tuple[str, str, str], Path] = {}

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        return stores_something(*key)

    def __getitem__(self, key: tuple[str, str, str]) -> Path:
        if key not in self.made:
            fixture, scheme, fmt = key
            dst = self.out / "-".join(key)
            self.made[key] = convert(
                FIXTURES / fixture, dst, scheme=scheme, format=fmt, target_layers=TARGET_LAYERS
            ).destination
        return self.made[key]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    return Converted(tmp_path_factory.mktemp("fidelity"))


@pytest.mark.parametrize(("scheme", "fmt"), CELLS)
@pytest.mark.slow
def test_correct_conversions_pass_over_seeds(converted, scheme: str, fmt: str) -> None:
    fixtures = [fixture for fixture in FIXTURE_NAMES if (fixture, scheme, fmt) in converted]
    assert len(fixtures) >= len(FIXTURE_NAMES) - 1, "a cell is checked on every fixture that it can store"
    for fixture in fixtures:
        for seed in SEEDS:
            report = verify(converted[(fixture, scheme, fmt)], source=FIXTURES / fixture, seed=seed)
            assert report.verdict == "passed", (fixture, seed, report.problems)


def _rehash(dst: Path) -> None:
    """Record the damaged files' SHA-256, as if eaglequant had written them: only the numbers can tell."""
    report_path = dst / "eaglequant_report.json"
    report = json.loads(report_path.read_text())
    for name in report["files"]:
        report["files"][name] = hashlib.sha256((dst / name).read_bytes()).hexdigest()
    report_path.write_text(json.dumps(report))


def _plant(converted, tmp_path: Path, key: tuple[str, str, str], damage) -> Path:  # type: ignore[no-untyped-def]
    dst = Path(shutil.copytree(converted[key], tmp_path / "faulty"))
    path = dst / "model.safetensors"
    tensors = load_file(path)
    damage(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    _rehash(dst)
    return dst


def _times_two_one_channel(tensors) -> None:  # type: ignore[no-untyped-def]
    tensors["midlayer.mlp.down_proj.weight_scale"][5] *= 2


def _flip_one_block_scale_byte(tensors) -> None:  # type: ignore[no-untyped-def]
    scale = tensors["midlayer.self_attn.o_proj.weight_scale"]
    raw = scale.view(torch.uint8).clone()
    byte = int(raw[5, 1])
    raw[5, 1] = byte ^ next(bit for bit in (0x40, 0x20, 0x10) if not byte & bit)  # an exponent bit: x4 or more
    tensors["midlayer.self_attn.o_proj.weight_scale"] = raw.view(scale.dtype)


def _swap_nibbles(tensors) -> None:  # type: ignore[no-untyped-def]
    packed = tensors["midlayer.mlp.up_proj.weight"]
    tensors["midlayer.mlp.up_proj.weight"] = (packed >> 4) | (packed << 4)


def _unshare_global_scale(tensors) -> None:  # type: ignore[no-untyped-def]
    tensors["midlayer.self_attn.k_proj.weight_global_scale"] *= 1.5


def _drop_a_scale(tensors) -> None:  # type: ignore[no-untyped-def]
    del tensors["midlayer.mlp.gate_proj.weight_scale"]


def _bf16_under_a_rule(tensors) -> None:  # type: ignore[no-untyped-def]
    weight = tensors["midlayer.self_attn.o_proj.weight"]
    tensors["midlayer.self_attn.o_proj.weight"] = weight.to(torch.float32).to(torch.bfloat16)
    del tensors["midlayer.self_attn.o_proj.weight_scale"]


FAULTS = [
    ("one channel's scale x2", ("specforge-llama", "fp8-per-channel", "quark"), _times_two_one_channel, "down_proj"),
    ("one block-scale byte flipped", ("specforge-llama", "nvfp4", "compressed-tensors"), _flip_one_block_scale_byte,
     "o_proj"),
    ("nibble order swapped", ("specforge-llama", "mxfp4", "quark"), _swap_nibbles, "up_proj"),
    ("fused members' global scales differ", ("specforge-llama", "nvfp4", "compressed-tensors"),
     _unshare_global_scale, "qkv_proj"),
    ("a missing scale", ("specforge-llama", "fp8-per-channel", "quark"), _drop_a_scale, "gate_proj"),
    ("a BF16 weight under a quantized rule", ("specforge-llama", "fp8-per-channel", "quark"), _bf16_under_a_rule,
     "o_proj"),
]  # fmt: skip


# One fault of each family in the fast subset (a channel scale: the numbers; a missing scale, a BF16 weight: the
# structure); the FP4 faults take a whole FP4 verify each.
FAST_FAULTS = ("one channel's scale x2", "a missing scale", "a BF16 weight under a quantized rule")


@pytest.mark.parametrize(
    ("name", "key", "damage", "where"),
    [pytest.param(*fault, id=fault[0], marks=() if fault[0] in FAST_FAULTS else pytest.mark.slow) for fault in FAULTS],
)
def test_every_planted_fault_fails(converted, tmp_path: Path, name: str, key, damage, where: str) -> None:  # type: ignore[no-untyped-def]
    dst = _plant(converted, tmp_path, key, damage)
    report = verify(dst, source=FIXTURES / key[0])
    assert report.verdict == "failed", name
    assert any(where in found.subject for found in report.problems), report.problems
    assert "sha256-differs" not in codes(report.problems)  # the numbers caught it, not the hashes
    refused = run_cli_subprocess("upload", dst, "org/name", "--dry-run", "--source", FIXTURES / key[0],
                                 env={"HF_ENDPOINT": "http://127.0.0.1:9"})  # fmt: skip
    assert refused.returncode == 3 and "fails verify" in refused.stderr


def _shift(**values: float) -> DistributionShift:
    base = {"mean_tv": 0.01, "tv_spread": 0.01, "mean_kl": 0.001, "kl_spread": 0.001, "top1_agreement": 1.0,
            "flips": 0, "noise_flips": 0.0}  # fmt: skip
    return DistributionShift(**{**base, **values})  # type: ignore[arg-type]


def test_head_statistics_decide_on_confidence_bounds() -> None:
    limits = load_scheme("fp8-per-channel").verify
    assert judge_shift(_shift(), 256, limits) == []
    # a mean above the threshold whose lower bound is not: too little evidence to fail a conversion
    above = limits.max_mean_tv + 0.01
    assert judge_shift(_shift(mean_tv=above, tv_spread=0.3), 32, limits) == []
    assert judge_shift(_shift(mean_tv=above, tv_spread=0.01), 256, limits)
    # flips on near-ties that the perturbation explains are noise; many more are damage
    assert judge_shift(_shift(top1_agreement=0.85, flips=38, noise_flips=35.0), 256, limits) == []
    assert judge_shift(_shift(top1_agreement=0.85, flips=38, noise_flips=5.0), 256, limits)


def test_flat_logits_flip_without_failing() -> None:
    """Nearly flat logits: a tiny noise-like perturbation flips many arg-maxes, and that is not damage."""
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(512, 2048, generator=generator) * 0.01
    perturbed = reference + torch.randn(512, 2048, generator=generator) * 0.002
    shift = distribution_shift(reference, perturbed)
    assert shift.top1_agreement < 0.9  # the old fixed gate would fail this
    assert judge_shift(shift, 512, load_scheme("fp8-per-channel").verify) == []
    biased = reference.clone()
    biased[:, 7] += 0.05  # one token always wins: structured damage
    assert judge_shift(distribution_shift(reference, biased), 512, load_scheme("fp8-per-channel").verify)


@pytest.mark.slow
def test_captured_inputs_drive_the_fidelity_run(tmp_path: Path) -> None:
    """convert --calib --verify and verify --inputs run the head on the captured inputs, and say so."""
    calib = write_calibration("specforge-llama", tmp_path / "calib.safetensors", sequences=3, tokens=20)
    dst = tmp_path / "out"
    result = convert(FIXTURES / "specforge-llama", dst, scheme="nvfp4", format="modelopt", calib=calib,
                     verify_output=True)  # fmt: skip
    fidelity = result.verification.fidelity
    assert fidelity.tokens == 60 and fidelity.inputs.startswith("captured: calib.safetensors (3 sequences")
    assert "captured: calib.safetensors" in (dst / "README.md").read_text()
    later = verify(dst, source=FIXTURES / "specforge-llama", inputs=calib)
    assert later.verdict == "passed" and later.fidelity.inputs == fidelity.inputs
    synthetic = verify(dst, source=FIXTURES / "specforge-llama")
    assert synthetic.fidelity.inputs.startswith("synthetic: seed 0")


def test_bad_inputs_are_one_line_naming_the_flag(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    convert(FIXTURES / "specforge-llama", dst)
    wrong = tmp_path / "wrong.safetensors"
    save_file({"hidden_states": torch.zeros(1, 4, 7), "input_ids": torch.zeros(1, 4, dtype=torch.int64)}, wrong)
    result = run_cli("verify", dst, "--source", FIXTURES / "specforge-llama", "--inputs", wrong)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and lines[-1].startswith("error: --inputs") and "hidden_states" in lines[-1]


def test_floor_as_float32_gemm_is_the_bf16_gemm() -> None:
    """The bf16 floor multiplies bf16 values in a float32 GEMM: products of two bf16 values are exact in float32,
    so only the summation order can differ from torch's bf16 matmul (float32 accumulation, one final rounding):
    at most one bf16 step apart, and the same for most entries."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 512, generator=generator).to(torch.bfloat16)
    w = (torch.randn(300, 512, generator=generator) * 0.02).to(torch.bfloat16)
    engine = (x @ w.T).float()
    ours = (x.float() @ w.float().T).to(torch.bfloat16).float()
    step = engine.abs().clamp_min(1e-30) * 2.0**-7  # one bf16 step (8 significant bits) above the value
    assert bool(((ours - engine).abs() <= step * 1.0001).all())
    assert float((ours == engine).double().mean()) > 0.95


def test_parity_riding_on_the_draft_is_parity_alone(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each linear's parity, gathered while the quantized draft runs it (one dequantization per block for both),
    gives the same figures as run on its own before the fidelity run (what verify did before)."""
    import eaglequant.verification.against_source as verify_module

    key = ("specforge-llama", "fp8-per-channel", "quark")
    riding = verify(converted[key], source=FIXTURES / key[0], seed=1)
    real = verify_module.head_fidelity
    monkeypatch.setattr(verify_module, "head_fidelity", lambda *args: real(*args[:-1], None))  # nothing rides
    alone = verify(converted[key], source=FIXTURES / key[0], seed=1)
    assert len(riding.layers) == 7 and riding.verdict == alone.verdict == "passed"
    for ours, theirs in zip(riding.layers, alone.layers, strict=True):  # the same up to float32 summation order
        assert (ours.module, ours.worst_block, ours.failed) == (theirs.module, theirs.worst_block, theirs.failed)
        assert (ours.sqnr_db, ours.cosine, ours.relative_error) == pytest.approx(
            (theirs.sqnr_db, theirs.cosine, theirs.relative_error), rel=1e-6
        )
        assert ours.max_block_error == theirs.max_block_error  # from the weights alone
    assert riding.fidelity.to_json() == alone.fidelity.to_json()  # the draft's rows are the same either way


@pytest.mark.parametrize("fixture", ["specforge-llama", "torchspec-mla"])
def test_stacked_sequences_run_as_each_alone(fixture: str) -> None:
    """The fidelity run stacks the floor's positions beneath the reference's, one pass over each weight for both:
    each stacked sequence attends only to itself and computes what it computes alone."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.draft.forward import DraftForward
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.detect import describe_head

    with Checkpoint.open(FIXTURES / fixture) as checkpoint:
        head = describe_head(checkpoint)
        forward = DraftForward(head, CanonicalWeights(checkpoint, head))
        generator = torch.Generator().manual_seed(0)
        dims = head.dims
        aux = torch.randn(12, dims.num_aux_hidden_states * dims.target_hidden_size, generator=generator)
        embeds = torch.randn(12, dims.hidden_size, generator=generator) * 0.02
        first, second = forward(aux[:7], embeds[:7]), forward(aux[7:], embeds[7:])
        stacked, whole = forward(aux, embeds, sequences=(7, 5)), forward(aux, embeds)
    torch.testing.assert_close(stacked, torch.cat((first, second)), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(stacked[7:], whole[7:], rtol=1e-3, atol=1e-3)  # one sequence of 12 is not that
