"""A float32 reference forward of an EAGLE-3 draft head, as the engines compute it.

Used to calibrate static activation scales (the input amax of every linear) and, in verification, to
compare the BF16 head with its quantized weights. One layer (or several) reads
``cat(input_layernorm(embed(token)), hidden_norm(fc(cat(h_low, h_mid, h_high))))``; later layers are
plain decoder layers. Attention is Llama GQA or DeepSeek/Kimi MLA, causal, with RoPE.

Sources: vLLM ``model_executor/models/llama_eagle3.py`` and ``deepseek_eagle3.py``; SpecForge
``specforge/modeling/draft/llama3_eagle.py``.

Weights are read through :class:`~eaglequant.draft.weights.CanonicalWeights`, a block of rows at a time, so
memory holds one block of one weight plus activations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from eaglequant.draft.weights import CanonicalWeights, by_output_rows, widened
from eaglequant.layouts.detect import dims_source
from eaglequant.layouts.head import HeadDescription

LinearFn = Callable[[str, torch.Tensor], torch.Tensor]  # canonical module, input -> output


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight.to(torch.float32)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE over the last dim of x [T, heads, d]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos = torch.cat((angles.cos(), angles.cos()), -1)[:, None, :]
    sin = torch.cat((angles.sin(), angles.sin()), -1)[:, None, :]
    half = d // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, positions: torch.Tensor) -> torch.Tensor:
    """Causal attention. q [T, nh, d], k [T, nkv, d], v [T, nkv, dv] -> [T, nh * dv]; each run of ``positions``
    from 0 is a sequence of its own (rows of several sequences stacked for one pass over the weights)."""
    starts = (positions == 0).nonzero().reshape(-1).tolist()
    if len(starts) > 1:
        bounds = [*starts, len(positions)]
        parts = [slice(a, b) for a, b in itertools.pairwise(bounds)]
        return torch.cat([_attend(q[p], k[p], v[p], scale, positions[p]) for p in parts])
    repeat = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(repeat, dim=1)
    v = v.repeat_interleave(repeat, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale
    )
    return out.transpose(0, 1).reshape(q.shape[0], -1)


class DraftForward:
    """Runs the head on one sequence; ``linear`` computes every linear (plain, quantized, or observed)."""

    def __init__(self, head: HeadDescription, weight: CanonicalWeights, linear: LinearFn | None = None) -> None:
        self.head = head
        self.weight = weight
        self.linear = linear or self.plain_linear
        config = dims_source(head.config)  # speculators keep rope_theta and eps under transformer_layer_config
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.theta = float(config.get("rope_theta", (config.get("rope_scaling") or {}).get("rope_theta", 10000.0)))
        self.present = {t.module + "." + t.name.rsplit(".", 1)[-1] for t in head.tensors}

    def plain_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """float32 x @ W^T, reading W a block of rows at a time."""
        name = f"{module}.weight"

        def product(rows: slice) -> torch.Tensor:
            return x @ widened(self.weight.rows(name, rows)).T

        return by_output_rows(len(x), self.weight.shape(name)[0], self.weight.row_blocks(name), product)

    def norm(self, module: str, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight(f"{module}.weight"), self.eps)

    def __call__(
        self,
        aux_hidden: torch.Tensor,
        embeds: torch.Tensor,
        *,
        logits: bool = True,
        sequences: tuple[int, ...] = (),
    ) -> torch.Tensor:
        """aux_hidden [T, n_aux * H_target], embeds [T, H] -> logits [T, V_draft] (or final hidden). ``sequences``:
        the lengths of the sequences stacked in the T rows, each attending only to itself (default: one)."""
        aux_hidden = aux_hidden.to(torch.float32)
        if "input_norm.weight" in self.present:
            aux_hidden = self.norm("input_norm", aux_hidden)
        if "fc_norm.0.weight" in self.present:
            chunks = aux_hidden.chunk(self.head.dims.num_aux_hidden_states, dim=-1)
            aux_hidden = torch.cat([self.norm(f"fc_norm.{i}", c) for i, c in enumerate(chunks)], -1)
        hidden = self.linear("fc", aux_hidden)
        positions = torch.cat([torch.arange(length) for length in sequences or (hidden.shape[0],)])
        for layer in range(self.head.num_layers):
            hidden = self.layer(layer, hidden, embeds.to(torch.float32), positions)
        hidden = self.norm("norm", hidden)
        if not logits or "lm_head.weight" not in self.present:
            return hidden
        return self.linear("lm_head", hidden)

    def layer(self, index: int, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        p = f"layers.{index}"
        residual = hidden
        if f"{p}.hidden_norm.weight" in self.present:
            x = torch.cat((self.norm(f"{p}.input_layernorm", embeds), self.norm(f"{p}.hidden_norm", hidden)), -1)
        else:
            x = self.norm(f"{p}.input_layernorm", hidden)
        attention = self.mla if self.head.attention == "mla" else self.gqa
        hidden = residual + attention(p, x, positions)
        residual = hidden
        x = self.norm(f"{p}.post_attention_layernorm", hidden)
        gate = self.linear(f"{p}.mlp.gate_proj", x)
        up = self.linear(f"{p}.mlp.up_proj", x)
        return residual + self.linear(f"{p}.mlp.down_proj", torch.nn.functional.silu(gate) * up)

    def gqa(self, p: str, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        dims = self.head.dims
        t, hd = x.shape[0], dims.head_dim
        q = self.linear(f"{p}.self_attn.q_proj", x).view(t, -1, hd)
        k = self.linear(f"{p}.self_attn.k_proj", x).view(t, -1, hd)
        v = self.linear(f"{p}.self_attn.v_proj", x).view(t, -1, hd)
        q, k = _rope(q, positions, self.theta), _rope(k, positions, self.theta)
        return self.linear(f"{p}.self_attn.o_proj", _attend(q, k, v, 1 / math.sqrt(hd), positions))

    def mla(self, p: str, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        d = self.head.dims
        assert d.kv_lora_rank and d.qk_nope_head_dim is not None and d.qk_rope_head_dim and d.v_head_dim
        t, nope, rope = x.shape[0], d.qk_nope_head_dim, d.qk_rope_head_dim
        if d.q_lora_rank:
            q_latent = self.norm(f"{p}.self_attn.q_a_layernorm", self.linear(f"{p}.self_attn.q_a_proj", x))
            q = self.linear(f"{p}.self_attn.q_b_proj", q_latent)
        else:
            q = self.linear(f"{p}.self_attn.q_proj", x)
        q = q.view(t, -1, nope + rope)
        kv_a = self.linear(f"{p}.self_attn.kv_a_proj_with_mqa", x)
        latent = self.norm(f"{p}.self_attn.kv_a_layernorm", kv_a[:, : d.kv_lora_rank])
        k_rope = _rope(kv_a[:, None, d.kv_lora_rank :], positions, self.theta)
        kv = self.linear(f"{p}.self_attn.kv_b_proj", latent).view(t, -1, nope + d.v_head_dim)
        k_nope, v = kv[..., :nope], kv[..., nope:]
        heads = q.shape[1]
        q = torch.cat((q[..., :nope], _rope(q[..., nope:], positions, self.theta)), -1)
        k = torch.cat((k_nope, k_rope.expand(t, heads, rope)), -1)
        return self.linear(f"{p}.self_attn.o_proj", _attend(q, k, v, 1 / math.sqrt(nope + rope), positions))
