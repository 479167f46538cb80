"""Peak memory is bounded by a constant (a few row blocks in flight and the hashers' windows), not by
the checkpoint's size nor by its largest tensor: here the quantized lm_head alone is larger than the bound.

This checks a property with a wide margin; the memory *goals* on full-size heads belong to the
benchmark (``eaglequant bench convert``), not to unit tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

MIB = 2**20


def _big_head(path: Path) -> tuple[int, int]:
    """A Llama EAGLE-3 head with H=1024 and a 256 MiB embedding + lm_head: ~540 MiB in all."""
    h, inter, vocab = 1024, 4096, 131072
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    path.mkdir()
    tensors = {
        "fc.weight": rand(h, 3 * h),
        "norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "embed_tokens.weight": rand(vocab, h),
        "lm_head.weight": rand(vocab, h),
        "midlayer.self_attn.q_proj.weight": rand(h, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(h, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(h, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, h),
        "midlayer.mlp.gate_proj.weight": rand(inter, h),
        "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
    }
    for norm in ("hidden_norm", "input_layernorm", "post_attention_layernorm"):
        tensors[f"midlayer.{norm}.weight"] = torch.ones(h, dtype=torch.bfloat16)
    save_file(tensors, path / "model.safetensors")
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
    }
    (path / "config.json").write_text(json.dumps(config))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    largest_quantized = vocab * h * 2  # lm_head, quantized below
    return total, largest_quantized


MEASURE = """
import json, sys
import torch, eaglequant
from eaglequant import convert

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

torch.zeros(1).abs()  # initialise torch's CPU allocator before the baseline
baseline = status("VmRSS:")
convert(sys.argv[1], sys.argv[2], quantize=["lm_head"], format="modelopt")
print(json.dumps({"baseline": baseline, "peak": status("VmHWM:")}))
"""


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_the_checkpoint(tmp_path: Path) -> None:
    total, largest = _big_head(tmp_path / "src")
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tmp_path / "src"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    figures = json.loads(proc.stdout)
    growth = figures["peak"] - figures["baseline"]
    bound = 192 * MIB  # whatever the tensor sizes: row blocks of 4M elements, two per worker in flight
    assert bound < largest  # holding the largest tensor alone would break the bound
    assert growth < bound, (
        f"peak grew {growth / MIB:.0f} MiB (bound {bound / MIB:.0f} MiB, checkpoint {total / MIB:.0f} MiB)"
    )
    assert bound < total / 2  # the test would catch a pipeline that holds the checkpoint
