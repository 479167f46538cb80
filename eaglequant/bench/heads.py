"""Full-size synthetic Kimi-K2.5 EAGLE-3 heads for ``bench convert``, written once and cached.

Two layouts, with the real heads' names, shapes and config keys (FORMATS.md §1):

- ``kimi-llama``: SpecForge (lightseekorg/kimi-k2.5-eagle3): ``midlayer.*``, MHA with 64 heads of 128,
  I = 12288, embed and lm_head over the full 163840 vocab; one ``model.safetensors`` of 6.36 GB bf16.
- ``kimi-mla``: TorchSpec MLA (lightseekorg/kimi-k2.5-eagle3-mla): Kimi's MLA dims
  (q_lora 1536, kv_lora 512, nope 128, rope 64, v 128).

Weights are seeded normal(0, 0.02) in bf16, generated and streamed in row blocks, so writing a head
needs a few hundred MB whatever its size. A head is written into a temporary directory and renamed, so
an interrupted generation is never mistaken for a cached one.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec
from eaglequant.common.atomic import replaced_whole

H = 7168
VOCAB = 163840
INTERMEDIATE = 12288
HEADS = 64
HEAD_DIM = 128
MLA_DIMS = {
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
AUX_LAYERS = [2, 30, 58]
GENERATOR_VERSION = 1  # bump when the tensors or config change, so stale caches are regenerated
ROW_BLOCK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class SyntheticHead:
    name: str
    title: str
    config: dict[str, Any]
    tensors: list[tuple[str, tuple[int, ...]]]  # name, shape (all bf16)

    @property
    def nbytes(self) -> int:
        return sum(TensorSpec(n, "BF16", s).nbytes for n, s in self.tensors)


def _common(
    hidden: int,
    intermediate: int,
    vocab: int,
    extra_linears: Sequence[tuple[str, tuple[int, ...]]],
    norms: list[tuple[str, int]],
) -> list[Any]:
    return [
        ("fc.weight", (hidden, 3 * hidden)),
        *extra_linears,
        ("midlayer.mlp.gate_proj.weight", (intermediate, hidden)),
        ("midlayer.mlp.up_proj.weight", (intermediate, hidden)),
        ("midlayer.mlp.down_proj.weight", (hidden, intermediate)),
        *[(name, (size,)) for name, size in norms],
        ("midlayer.hidden_norm.weight", (hidden,)),
        ("midlayer.input_layernorm.weight", (hidden,)),
        ("midlayer.post_attention_layernorm.weight", (hidden,)),
        ("norm.weight", (hidden,)),
        ("lm_head.weight", (vocab, hidden)),
        ("embed_tokens.weight", (vocab, hidden)),
    ]


def llama_head(
    hidden: int = H,
    intermediate: int = INTERMEDIATE,
    heads: int = HEADS,
    head_dim: int = HEAD_DIM,
    vocab: int = VOCAB,
    name: str = "kimi-llama",
) -> SyntheticHead:
    """A SpecForge Llama head; the defaults are Kimi-K2.5's (smaller ones serve the crash tests)."""
    attn = heads * head_dim
    linears = [
        ("midlayer.self_attn.q_proj.weight", (attn, 2 * hidden)),
        ("midlayer.self_attn.k_proj.weight", (attn, 2 * hidden)),
        ("midlayer.self_attn.v_proj.weight", (attn, 2 * hidden)),
        ("midlayer.self_attn.o_proj.weight", (hidden, attn)),
    ]
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS, "use_aux_hidden_state": True},
    }
    tensors = _common(hidden, intermediate, vocab, linears, [])
    return SyntheticHead(name, "Kimi-K2.5 EAGLE-3, SpecForge Llama layout", config, tensors)


def kimi_llama_scaled(divisor: int) -> SyntheticHead:
    """The Kimi-K2.5 Llama head with every dimension (head_dim aside) divided by ``divisor``."""
    return llama_head(H // divisor, INTERMEDIATE // divisor, HEADS // divisor, HEAD_DIM, VOCAB // divisor,
                      name=f"kimi-llama-div{divisor}")  # fmt: skip


def kimi_mla(divisor: int = 1) -> SyntheticHead:
    """The Kimi-K2.5 MLA head; ``divisor`` divides every dimension (a smaller head of the same shape)."""
    d = {key: value // divisor for key, value in MLA_DIMS.items()}
    hidden, heads, vocab, intermediate = H // divisor, HEADS // divisor, VOCAB // divisor, INTERMEDIATE // divisor
    qk = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    linears = [
        ("midlayer.self_attn.q_a_proj.weight", (d["q_lora_rank"], 2 * hidden)),
        ("midlayer.self_attn.q_b_proj.weight", (heads * qk, d["q_lora_rank"])),
        ("midlayer.self_attn.kv_a_proj_with_mqa.weight", (d["kv_lora_rank"] + d["qk_rope_head_dim"], 2 * hidden)),
        ("midlayer.self_attn.kv_b_proj.weight", (heads * (d["qk_nope_head_dim"] + d["v_head_dim"]), d["kv_lora_rank"])),
        ("midlayer.self_attn.o_proj.weight", (hidden, heads * d["v_head_dim"])),
    ]
    norms = [
        ("midlayer.self_attn.q_a_layernorm.weight", d["q_lora_rank"]),
        ("midlayer.self_attn.kv_a_layernorm.weight", d["kv_lora_rank"]),
    ]
    config = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": "kimi_k2",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        **d,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 50000.0,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS, "use_aux_hidden_state": True},
    }
    tensors = _common(hidden, intermediate, vocab, linears, norms)
    name = "kimi-mla" if divisor == 1 else f"kimi-mla-div{divisor}"
    return SyntheticHead(name, "Kimi-K2.5 EAGLE-3, TorchSpec MLA layout", config, tensors)


def tiny_head() -> SyntheticHead:
    """A 6 MB Llama head: checks that the benchmark runs, in a second; its timings mean nothing."""
    return llama_head(hidden=256, intermediate=512, heads=4, head_dim=64, vocab=4096, name="tiny")


HEADS_BY_NAME: dict[str, Callable[[], SyntheticHead]] = {
    "kimi-llama": llama_head,
    "kimi-mla": kimi_mla,
    "tiny": tiny_head,
}
FULL_SIZE_HEADS = ("kimi-llama", "kimi-mla")


def cached_head(name: str, cache_dir: Path) -> Path:
    """The directory of head ``name`` under ``cache_dir``, generating it first if it is not there."""
    head = HEADS_BY_NAME[name]()
    target = cache_dir / f"{name}-v{GENERATOR_VERSION}"
    if (target / "config.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with replaced_whole(target) as partial:
        partial.mkdir()
        write_head(head, partial)
    return target


def write_head(head: SyntheticHead, directory: Path) -> None:
    import torch

    specs = [TensorSpec(name, "BF16", shape) for name, shape in head.tensors]
    shard = SafetensorsShard(directory / "model.safetensors", specs, metadata={"format": "pt"})
    for name, shape in head.tensors:
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        if len(shape) == 1:
            norm = (1.0 + 0.1 * torch.randn(shape, generator=gen)).to(torch.bfloat16)
            shard.write(name, 0, norm.view(torch.uint16).numpy().data)
            continue
        rows, cols = shape
        step = max(1, ROW_BLOCK_ELEMENTS // cols)
        for start in range(0, rows, step):
            block = torch.empty(min(step, rows - start), cols, dtype=torch.bfloat16).normal_(0, 0.02, generator=gen)
            shard.write(name, start * cols * 2, block.view(torch.uint16).numpy().data)
    shard.close()
    (directory / "config.json").write_text(json.dumps(head.config, indent=2) + "\n", encoding="utf-8")


def write_head_headers(head: SyntheticHead, directory: Path) -> None:
    """``head`` with its headers and config only: the shard is sized but its data is a hole (zeros, no disk used), for
    the commands that read headers alone (``inspect`` and its model of a round's cost)."""
    from eaglequant.checkpoint.writer import safetensors_header

    specs = [TensorSpec(name, "BF16", shape) for name, shape in head.tensors]
    header = safetensors_header(specs, {"format": "pt"})
    path = directory / "model.safetensors"
    with path.open("wb") as file:
        file.write(header)
        file.truncate(len(header) + sum(spec.nbytes for spec in specs))
    (directory / "config.json").write_text(json.dumps(head.config, indent=2) + "\n", encoding="utf-8")
