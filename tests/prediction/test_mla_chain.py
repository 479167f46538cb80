"""MLA draft heads chained as vLLM 0.32 chains them (``deepseek_eagle3.py``), and predicted end to end.

The reference here is the same math written plainly in float64 from vLLM's source (``deepseek_v2.py``,
``layers/mla.py``, ``rotary_embedding/deepseek_scaling_rope.py``): latent projections, interleaved RoPE on the
last ``qk_rope_head_dim`` dims with DeepSeek's yarn, the softmax scale times ``mscale ** 2``, and each step of the
chain attending to step 1's cached latent and rope key at earlier positions and to its own chain's. It shares
no code with ``eaglequant.draft.forward``; the variants with a wrong rope must disagree, so the comparison can fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import eaglequant
from tests.conftest import FIXTURES

PAIR = FIXTURES / "trained-pair-mla"
MLA_DRAFT = PAIR / "draft"
HEADS = [FIXTURES / "torchspec-mla", MLA_DRAFT]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    return {k.removeprefix("midlayer."): v.to(torch.float64) for k, v in tensors.items() if v.is_floating_point()}


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _mscale(factor: float, m: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def _rope_table(config: dict, positions: torch.Tensor, yarn: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
    """cos, sin [T, rope / 2] of DeepSeek's yarn (or plain RoPE), and the softmax scale's factor."""
    dim, theta = config["qk_rope_head_dim"], float(config["rope_theta"])
    freq = [theta ** (-2 * i / dim) for i in range(dim // 2)]
    scaling = config.get("rope_scaling")
    if not (yarn and scaling):
        angles = positions[:, None].double() * torch.tensor(freq, dtype=torch.float64)
        return angles.cos(), angles.sin(), 1.0
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    found = [
        dim * math.log(original / (r * 2 * math.pi)) / (2 * math.log(theta))
        for r in (scaling["beta_fast"], scaling["beta_slow"])
    ]
    low, high = max(math.floor(found[0]), 0), min(math.ceil(found[1]), dim - 1)
    high = high + 0.001 if low == high else high
    blended = []
    for i, f in enumerate(freq):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: extrapolated (as trained), 1: interpolated
        blended.append(f / factor * ramp + f * (1 - ramp))
    angles = positions[:, None].double() * torch.tensor(blended, dtype=torch.float64)
    magnitude = _mscale(factor, scaling["mscale"]) / _mscale(factor, scaling["mscale_all_dim"])
    return angles.cos() * magnitude, angles.sin() * magnitude, _mscale(factor, scaling["mscale_all_dim"]) ** 2


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """x [T, heads, d]: each pair (2i, 2i + 1) (interleaved) or (i, i + d/2) turned by its angle."""
    out = x.clone()
    half = x.shape[-1] // 2
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        c, s = cos[:, i, None], sin[:, i, None]
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out


def _reference_chain(
    folder: Path, aux: torch.Tensor, ids: torch.Tensor, steps: int, **variant: bool
) -> list[torch.Tensor]:
    """Per step, the logits [T, V] of the chained MLA draft in float64. ``variant``: ``interleaved`` (vLLM's
    is_neox_style=False), ``yarn`` (the config's rope_scaling), ``rope_last`` (the rope dims are each q head's last
    ones): each True as vLLM runs it."""
    import json

    interleaved, yarn, rope_last = (variant.get(k, True) for k in ("interleaved", "yarn", "rope_last"))
    c = json.loads((folder / "config.json").read_text())
    w, eps = _weights(folder), c["rms_norm_eps"]
    heads, nope, rope, dv, rank = (
        c[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank")
    )
    t = len(ids)
    hidden = aux.double() @ w["fc.weight"].T
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []  # per step: the normed latent [T, rank] and k_pe [T, rope]
    logits = []
    for step in range(steps):
        positions = torch.arange(t) + step
        cos, sin, softmax_factor = _rope_table(c, positions, yarn)
        embeds = w["embed_tokens.weight"][torch.cat((ids[step:], ids.new_zeros(step)))]
        x = torch.cat((_rms(embeds, w["input_layernorm.weight"], eps), _rms(hidden, w["hidden_norm.weight"], eps)), -1)
        q_latent = _rms(x @ w["self_attn.q_a_proj.weight"].T, w["self_attn.q_a_layernorm.weight"], eps)
        q = (q_latent @ w["self_attn.q_b_proj.weight"].T).view(t, heads, nope + rope)
        q_rope_dims = slice(nope, None) if rope_last else slice(0, rope)
        q_pass_dims = slice(0, nope) if rope_last else slice(rope, None)
        q_pe = _rotate(q[..., q_rope_dims], cos, sin, interleaved)
        kv_a = x @ w["self_attn.kv_a_proj_with_mqa.weight"].T
        latent = _rms(kv_a[:, :rank], w["self_attn.kv_a_layernorm.weight"], eps)
        cache.append((latent, _rotate(kv_a[:, None, rank:], cos, sin, interleaved)[:, 0]))
        scale = softmax_factor / math.sqrt(nope + rope)
        out = torch.zeros(t, heads, dv, dtype=torch.float64)
        for row in range(t):  # the chain that starts at draft position `row`
            read = [(0, j) for j in range(row + 1)] + [(s, row) for s in range(1, step + 1)]
            lat = torch.stack([cache[s][0][j] for s, j in read])
            k_pe = torch.stack([cache[s][1][j] for s, j in read])
            kv = (lat @ w["self_attn.kv_b_proj.weight"].T).view(len(read), heads, nope + dv)
            score = torch.einsum("hd,nhd->hn", q[row, :, q_pass_dims], kv[..., :nope])
            score = (score + torch.einsum("hd,nd->hn", q_pe[row], k_pe)) * scale
            out[row] = torch.einsum("hn,nhd->hd", torch.softmax(score, -1), kv[..., nope:])
        h = hidden + out.reshape(t, -1) @ w["self_attn.o_proj.weight"].T
        y = _rms(h, w["post_attention_layernorm.weight"], eps)
        gate, up = y @ w["mlp.gate_proj.weight"].T, y @ w["mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ w["mlp.down_proj.weight"].T
        logits.append(_rms(h, w["norm.weight"], eps) @ w["lm_head.weight"].T)
        hidden = h
    return logits


def _inputs(folder: Path, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    import json

    c = json.loads((folder / "config.json").read_text())
    generator = torch.Generator().manual_seed(0)
    aux = torch.randn(length, 3 * c["hidden_size"], generator=generator)
    return aux, torch.randint(0, c["vocab_size"], (length,), generator=generator)


def _chained(folder: Path, aux: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import open_draft

    with Checkpoint.open(folder) as checkpoint, torch.no_grad():
        return open_draft(checkpoint).forward.chain_logits(aux, ids, steps)


def _gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest logit difference over every step and position, relative to the logits' spread."""
    return max(((x.double() - y).abs().max() / y.std()).item() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("folder", HEADS, ids=lambda p: p.name)
def test_the_mla_chain_is_the_float64_reference(folder: Path) -> None:
    aux, ids = _inputs(folder, 24)
    chained = _chained(folder, aux, ids, 3)
    assert _gap(chained, _reference_chain(folder, aux, ids, 3)) < 1e-4


@pytest.mark.parametrize("wrong", ["interleaved", "yarn", "rope_last"])
def test_the_reference_tells_a_wrong_rope_apart(wrong: str) -> None:
    """Rotating halves (neox) instead of adjacent pairs, leaving out yarn, or rotating each head's first dims: the
    chained forward is off by far more than the tolerance above, so that comparison can fail."""
    aux, ids = _inputs(MLA_DRAFT, 24)
    chained = _chained(MLA_DRAFT, aux, ids, 3)
    assert _gap(chained, _reference_chain(MLA_DRAFT, aux, ids, 3, **{wrong: False})) > 1e-2


def test_an_mla_draft_is_predicted_by_verify_prune_and_search(captured_mla: Path, tmp_path: Path) -> None:
    from eaglequant.search.smallest import search

    dst = tmp_path / "fp8"
    eaglequant.convert(MLA_DRAFT, dst, scheme="fp8-per-channel", format="quark")
    report = eaglequant.verify(dst, source=MLA_DRAFT, inputs=captured_mla)
    assert report.acceptance is not None, report
    assert report.acceptance.source.acceptance_length.value > 1.5  # the trained MLA draft drafts on its target's text
    change = report.acceptance.difference
    assert abs(change.value) < 0.1, change  # FP8 barely moves the MLA draft's acceptance
    # four prompts give a wide interval: the one gate decides (within 0.05 by the drop's 95% bound, past it by the
    # whole interval, else inconclusive), and says its bound
    assert report.acceptance.failed == (change.high < -0.05)
    assert report.acceptance.inconclusive == (change.low < -0.05 <= change.high)
    assert report.ok or "bound" in str(report.problems[0]), report.problems
    if report.acceptance.inconclusive:
        assert "would settle it" in str(report.unsettled[0]) and report.verdict.exit_code == 7
    # every k from one chain; on four prompts of 32 tokens the finite walk may dip in k (24 prompts do not)
    assert list(report.acceptance.acceptance_by_draft_tokens()) == list(range(1, 9))
    pruned = eaglequant.prune(MLA_DRAFT, tmp_path / "pruned", size=512, counts=captured_mla, inputs=captured_mla)
    assert pruned.prediction is not None  # the same chain on the same sequences as verify's source
    assert pruned.prediction.source.acceptance_length == report.acceptance.source.acceptance_length
    found = search(
        MLA_DRAFT,
        tmp_path / "chosen",
        inputs=captured_mla,
        max_acceptance_drop="0.5",
        schemes=("fp8-per-channel",),
        max_draft_tokens=3,
    )
    assert found.chosen is not None and found.chosen.prediction is not None


@pytest.fixture(scope="module")
def captured_mla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs captured from the MLA pair's target for its draft: four held-out prompts, 32 tokens each."""
    tmp = tmp_path_factory.mktemp("captured-mla")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("\n".join((PAIR / "prompts.jsonl").read_text().splitlines()[:4]) + "\n")
    path = tmp / "inputs.safetensors"
    eaglequant.capture(PAIR / "target", MLA_DRAFT, path, prompts=prompts, max_tokens=32)
    return path


def test_the_mla_target_as_transformers_runs_it_is_the_training_scripts() -> None:
    """``capture`` runs the MLA pair's target with transformers (``DeepseekV3ForCausalLM``); the training script's
    plain-torch model of it (``fixtures/train_pair_deepseek.py``) gives the same logits and aux hidden states."""
    import importlib.util
    import sys

    import transformers
    from safetensors.torch import load_file

    spec = importlib.util.spec_from_file_location("train_pair", FIXTURES / "train_pair.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train  # its dataclasses look their module up
    spec.loader.exec_module(train)
    d, attention = train.deepseek_dims(
        train._sibling("train_pair_mla"), deepseek := train._sibling("train_pair_deepseek")
    )
    target = deepseek.DeepseekTarget(d, attention, torch.Generator())
    tensors = load_file(str(PAIR / "target" / "model.safetensors"))
    with torch.no_grad():
        for name, param in zip(target.names, target.params, strict=True):
            param.copy_(tensors[name].to(torch.float32))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(PAIR / "target"), dtype=torch.float32)
    ids = torch.randint(0, d.vocab, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, aux = target(ids, (1, 2, 3))
        output = model(ids, output_hidden_states=True)
    assert (output.logits - logits).abs().max() < 1e-3 * logits.std()
    for layer, state in zip((1, 2, 3), aux, strict=True):
        assert torch.allclose(output.hidden_states[layer], state, atol=1e-4)
