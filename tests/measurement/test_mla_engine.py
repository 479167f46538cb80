"""The bundled MLA draft (``fixtures/trained-pair/draft-mla``) against vLLM 0.32.0's own code (CPU build).

vLLM's RoPE for the draft's config (read with vLLM's config loader, built as ``DeepseekV2MLAAttention`` builds it)
must be the chained forward's, bit for bit. vLLM 0.32.0's CPU build cannot serve this MLA draft beside the pair's
GQA target (its CPU_MLA backend takes only 16-token KV blocks, CPU_ATTN only multiples of 32, and the CPU MLA decode
kernel only a 576-wide latent + rope key): ``accept`` says so before it loads anything (docs/acceptance.md, MLA draft
heads).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import eaglequant
from tests.engine_load.test_engine_load import engine_python

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
MLA_DRAFT = PAIR / "draft-mla"

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


@pytest.mark.engine
def test_the_cpu_build_s_refusal_of_this_pair_is_said_before_anything_loads(tmp_path: Path) -> None:
    """vLLM 0.32.0's CPU build cannot serve the bundled MLA draft beside the Llama target (no common KV block size;
    and its MLA kernel needs DeepSeek's 576-wide latent): accept says so in one line, exit 2, before it loads the
    target (issue 55, item 2), where it used to serve the target for minutes and then fail with exit 1."""
    from tests.conftest import run_cli

    dst = tmp_path / "fp8"
    eaglequant.convert(MLA_DRAFT, dst, scheme="fp8-per-channel", format="quark")
    shown = run_cli("accept", dst, "--target", PAIR / "target", "--source", MLA_DRAFT, "--engine-python",
                    engine_python("vllm"), "--no-record")  # fmt: skip
    said = " ".join(shown.stderr.split())
    assert shown.exit_code == 2, shown.stderr
    assert "vLLM's CPU build" in said and "an MLA draft beside a target without MLA" in said
    assert "no common block size" in said and "Traceback" not in shown.stderr


def test_what_the_cpu_build_refuses_is_read_from_the_configs() -> None:
    from eaglequant.measurement.engine_limits import cpu_build_refusal

    llama, kimi_like = {"hidden_size": 256}, {"kv_lora_rank": 512, "qk_rope_head_dim": 64}
    scaled_down = {"kv_lora_rank": 128, "qk_rope_head_dim": 32}
    assert cpu_build_refusal(llama, llama) is None and cpu_build_refusal(kimi_like, kimi_like) is None
    assert "without MLA" in (cpu_build_refusal(llama, kimi_like) or "")
    assert "the draft's is 160" in (cpu_build_refusal(kimi_like, scaled_down) or "")
    assert "the target's is 160" in (cpu_build_refusal(scaled_down, kimi_like) or "")
