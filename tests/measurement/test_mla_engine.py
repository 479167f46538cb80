"""The MLA pair (``fixtures/trained-pair-mla``: a DeepSeek-V3-shaped target, its MLA EAGLE-3 draft) against vLLM
0.32.0's own code (CPU build).

vLLM's RoPE for the draft's config (read with vLLM's config loader, built as ``DeepseekV2MLAAttention`` builds it)
must be the chained forward's, bit for bit. And vLLM serves the pair (CPU_MLA on both sides: the target's latent is
DeepSeek's 512 + 64, the only one the CPU MLA decode kernel takes), so each draft's acceptance as the engine
measures it (the source, FP8, NVFP4, and the vocabulary pruned to 1/2 and 1/4) must lie within the interval that
``verify --inputs`` (``prune --inputs`` for the pruned ones) predicted (docs/mla.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.engine_load.test_engine_load import engine_python

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair-mla"
MLA_DRAFT = PAIR / "draft"

pytestmark = [pytest.mark.engine, pytest.mark.slow]

_VLLM_ROPE = """
import sys

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.models.deepseek_v2 import yarn_get_mscale
from vllm.transformers_utils.config import get_config

config = get_config(sys.argv[1], trust_remote_code=False)
rope = dict(config.rope_parameters)
if rope["rope_type"] != "default":  # DeepseekV2MLAAttention.__init__, line for line
    rope["rope_type"] = "deepseek_llama_scaling" if rope.get("attention_factor") == 1.0 else "deepseek_yarn"
scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
if rope["rope_type"] == "deepseek_yarn":
    scale *= yarn_get_mscale(rope["factor"], float(rope.get("mscale_all_dim", False))) ** 2
with set_current_vllm_config(VllmConfig()):
    rotary = get_rope(
        config.qk_rope_head_dim, max_position=config.max_position_embeddings, rope_parameters=rope,
        is_neox_style=False,
    )
generator = torch.Generator().manual_seed(0)
positions = torch.arange(512)
q = torch.randn(512, config.num_attention_heads, config.qk_rope_head_dim, generator=generator)
k = torch.randn(512, 1, config.qk_rope_head_dim, generator=generator)
q_out, k_out = rotary.forward_native(positions, q.clone(), k.clone())
found = {"q": q, "k": k, "q_out": q_out, "k_out": k_out, "scale": scale, "class": type(rotary).__name__}
torch.save(found, sys.argv[2])
"""


def test_the_chains_mla_rope_and_softmax_scale_are_vllms(tmp_path: Path) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.draft.forward import DraftForward
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.detect import describe_head

    script, out = tmp_path / "rope.py", tmp_path / "rope.pt"
    script.write_text(_VLLM_ROPE)
    subprocess.run([engine_python("vllm"), str(script), str(MLA_DRAFT), str(out)], check=True, timeout=600)
    vllm = torch.load(out)
    assert vllm["class"] == "DeepseekScalingRotaryEmbedding"  # the config's yarn, as the engine reads it
    with Checkpoint.open(MLA_DRAFT) as checkpoint:
        head = describe_head(checkpoint)
        forward = DraftForward(head, CanonicalWeights(checkpoint, head))
    positions = torch.arange(512)
    assert torch.allclose(forward.rotary(vllm["q"], positions), vllm["q_out"], atol=1e-5)
    assert torch.allclose(forward.rotary(vllm["k"], positions), vllm["k_out"], atol=1e-5)
    assert forward.attention_scale == pytest.approx(vllm["scale"], rel=1e-12)


def test_measured_acceptance_of_the_mla_pair_lies_in_the_predicted_interval(tmp_path: Path) -> None:
    """Counts from the target's choices on the first 12 held-out prompts, prediction and measurement on 6 others
    (48 tokens each, k = 3, bf16, quantized drafts served dequantized): about 5 minutes on two shared cores."""
    import eaglequant
    from eaglequant.api.acceptance import accept

    lines = (PAIR / "prompts.jsonl").read_text().splitlines()
    counted, prompts = tmp_path / "counted.jsonl", tmp_path / "prompts.jsonl"
    counted.write_text("\n".join(lines[:12]) + "\n")
    prompts.write_text("\n".join(lines[12:18]) + "\n")
    counts, inputs = tmp_path / "counts.safetensors", tmp_path / "inputs.safetensors"
    eaglequant.capture(PAIR / "target", MLA_DRAFT, counts, prompts=counted, max_tokens=48)
    eaglequant.capture(PAIR / "target", MLA_DRAFT, inputs, prompts=prompts, max_tokens=48)
    dsts = [tmp_path / "fp8", tmp_path / "nvfp4"]
    eaglequant.convert(MLA_DRAFT, dsts[0], scheme="fp8-per-channel", format="quark", target_config=PAIR / "target")
    eaglequant.convert(MLA_DRAFT, dsts[1], scheme="nvfp4", format="modelopt", target_config=PAIR / "target")
    predicted = [eaglequant.verify(dst, source=MLA_DRAFT, inputs=inputs).acceptance for dst in dsts]
    for size in (1024, 512):
        pruned = eaglequant.prune(MLA_DRAFT, tmp_path / f"pruned-{size}", size=size, counts=counts, inputs=inputs)
        dsts.append(pruned.destination)
        predicted.append(pruned.prediction)
    assert all(p is not None for p in predicted)
    report = accept(
        dsts, target=PAIR / "target", source=MLA_DRAFT, prompts=prompts, max_tokens=48, record=False,
        engine_python=engine_python("vllm"), target_alone_runs=1,
    )  # fmt: skip
    measured = report.record().to_json()
    assert measured["source"]["modes"]["greedy"]["accepted"] > 0  # the trained draft drafts on its target's text
    rows = [("source", predicted[0].source, measured["source"])] + [
        (str(dst.name), p.quantized, m) for dst, p, m in zip(dsts, predicted, measured["quantized"], strict=True)
    ]
    for name, prediction, figures in rows:
        assert figures["lossless"]["ok"], (name, figures["lossless"])
        value = figures["modes"]["greedy"]["acceptance_length"]["value"]
        interval = prediction.acceptance_length.to_json()
        assert interval["low"] <= value <= interval["high"], (name, value, interval)
