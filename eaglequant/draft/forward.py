"""A float32 reference forward of an EAGLE-3 draft head, as the engines compute it.

Used to calibrate static activation scales (the input amax of every linear) and, in verification, to
compare the BF16 head with its quantized weights. One layer (or several) reads
``cat(input_layernorm(embed(token)), hidden_norm(fc(cat(h_low, h_mid, h_high))))``; later layers are
plain decoder layers. Attention is Llama GQA or DeepSeek/Kimi MLA, causal, with RoPE.

Sources: vLLM ``model_executor/models/llama_eagle3.py`` and ``deepseek_eagle3.py``; SpecForge
``specforge/modeling/draft/llama3_eagle.py``.

MLA as vLLM 0.32 runs it (``deepseek_eagle3.py``: ``DeepseekV2Eagle3DecoderLayer`` builds
``deepseek_v2.py::DeepseekV2MLAAttention`` with ``input_size=2 * hidden_size``, whose forward is
``model_executor/layers/mla.py::MultiHeadLatentAttentionWrapper.forward``):

- the latent projections: ``q_a_proj`` and ``kv_a_proj_with_mqa`` (one ``fused_qkv_a_proj`` in vLLM) read the
  layer input; q is ``q_b_proj(q_a_layernorm(q_a))`` (or ``q_proj(x)`` without ``q_lora_rank``), viewed as heads
  of ``qk_nope_head_dim + qk_rope_head_dim``; ``kv_a`` splits into the latent ``kv_c`` (``kv_lora_rank``), normed
  by ``kv_a_layernorm``, and one rope key ``k_pe`` (``qk_rope_head_dim``) shared by every head; ``kv_b_proj`` of
  the normed latent gives each head's ``k_nope`` and ``v`` (``MLAAttention``'s prefill path; decode absorbs
  ``kv_b_proj`` into q and the output, the same products);
- the rope part: only the last ``qk_rope_head_dim`` dims of each q head and ``k_pe`` are rotated, in pairs of
  adjacent dims (``get_rope(..., is_neox_style=False)``: ``rotary_embedding/common.py::rotate_gptj``); a
  ``rope_scaling`` other than the default becomes ``deepseek_yarn`` (``deepseek_llama_scaling`` when its
  ``attention_factor`` is 1.0), ``rotary_embedding/deepseek_scaling_rope.py::DeepseekScalingRotaryEmbedding``:
  yarn's blend of interpolated and extrapolated frequencies over the ramp between ``beta_fast`` and
  ``beta_slow`` rotations of ``original_max_position_embeddings``, cos and sin times
  ``yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)``; and for ``deepseek_yarn`` the
  softmax scale ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`` times ``yarn_get_mscale(factor,
  mscale_all_dim) ** 2`` (``DeepseekV2MLAAttention.__init__``);
- the KV cache holds, per position, the normed latent ``kv_c`` and the rotated ``k_pe``
  (``MLAAttention``'s cache update); every key and value is a product of them.

Weights are read through :class:`~eaglequant.draft.weights.CanonicalWeights`, a block of rows at a time, so
memory holds one block of one weight plus activations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from eaglequant.draft.weights import CanonicalWeights, by_output_rows, widened
from eaglequant.layouts.detect import dims_source
from eaglequant.layouts.head import Attention, HeadDescription

LinearFn = Callable[[str, torch.Tensor], torch.Tensor]  # canonical module, input -> output


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight.to(torch.float32)


@dataclass(frozen=True)
class Rotary:
    """RoPE over the last dim of x [T, heads, d]: angles ``position * inv_freq``, cos and sin times ``magnitude``;
    ``interleaved`` rotates adjacent pairs (2i, 2i + 1) (vLLM's ``is_neox_style=False``), otherwise the halves
    (i, i + d/2) (Llama's rotate-half)."""

    inv_freq: torch.Tensor  # [d/2]
    interleaved: bool
    magnitude: float = 1.0

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos() * self.magnitude, angles.sin() * self.magnitude
        if self.interleaved:
            cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
            rotated = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
        else:
            cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
            half = x.shape[-1] // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos[:, None, :] + rotated * sin[:, None, :]


def _inv_freq(theta: float, dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def yarn_mscale(factor: float, mscale: float) -> float:
    """``yarn_get_mscale`` of vLLM's ``deepseek_scaling_rope.py``."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_scaling(config: dict[str, Any]) -> dict[str, Any] | None:
    """The config's RoPE scaling (``rope_scaling``, or transformers 5's ``rope_parameters``); None: the default."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if not isinstance(scaling, dict) or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return None
    return scaling


def mla_rotary(config: dict[str, Any], dim: int, theta: float) -> tuple[Rotary, float]:
    """The rotary embedding of an MLA head's rope dims and the factor on its softmax scale, as
    ``DeepseekV2MLAAttention`` builds them (``get_rope(..., is_neox_style=False)``; a scaled RoPE is
    ``DeepseekScalingRotaryEmbedding``, yarn with vLLM's ``yarn_find_correction_range`` and ramp)."""
    scaling = rope_scaling(config)
    if scaling is None:
        return Rotary(_inv_freq(theta, dim), interleaved=True), 1.0
    factor = float(scaling["factor"])
    original = float(scaling.get("original_max_position_embeddings", config.get("max_position_embeddings", 2048)))
    fast, slow = float(scaling.get("beta_fast", 32)), float(scaling.get("beta_slow", 1))

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(fast)), 0)
    high = float(min(math.ceil(correction_dim(slow)), dim - 1))
    high = high + 0.001 if low == high else high  # as vLLM's yarn_linear_ramp_mask
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolated = _inv_freq(theta, dim)
    inv_freq = extrapolated / factor * ramp + extrapolated * (1 - ramp)
    all_dims = yarn_mscale(factor, float(scaling.get("mscale_all_dim", 0)))
    magnitude = yarn_mscale(factor, float(scaling.get("mscale", 1))) / all_dims
    softmax = 1.0 if scaling.get("attention_factor") == 1.0 else all_dims**2
    return Rotary(inv_freq, interleaved=True, magnitude=magnitude), softmax


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
        self.rotary, self.attention_scale = self._rotary(head, config)

    def _rotary(self, head: HeadDescription, config: dict[str, Any]) -> tuple[Rotary, float]:
        """The rotary embedding of the head's attention and its softmax scale."""
        d = head.dims
        if head.attention != Attention.MLA:
            return Rotary(_inv_freq(self.theta, d.head_dim), interleaved=False), 1 / math.sqrt(d.head_dim)
        assert d.qk_nope_head_dim is not None and d.qk_rope_head_dim
        rotary, softmax = mla_rotary(config, d.qk_rope_head_dim, self.theta)
        return rotary, softmax / math.sqrt(d.qk_nope_head_dim + d.qk_rope_head_dim)

    def plain_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """float32 x @ W^T, reading W a block of rows at a time."""
        name = f"{module}.weight"

        def product(rows: slice) -> torch.Tensor:
            return x @ widened(self.weight.rows(name, rows)).T

        return by_output_rows(len(x), self.weight.shape(name)[0], self.weight.row_blocks(name), product)

    def norm(self, module: str, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight(f"{module}.weight"), self.eps)

    def fc_of(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """Step 1's hidden state: ``fc`` of the (normed) aux states."""
        aux_hidden = aux_hidden.to(torch.float32)
        if "input_norm.weight" in self.present:
            aux_hidden = self.norm("input_norm", aux_hidden)
        if "fc_norm.0.weight" in self.present:
            chunks = aux_hidden.chunk(self.head.dims.num_aux_hidden_states, dim=-1)
            aux_hidden = torch.cat([self.norm(f"fc_norm.{i}", c) for i, c in enumerate(chunks)], -1)
        return self.linear("fc", aux_hidden)

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
        hidden = self.fc_of(aux_hidden)
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
        attention = self.mla if self.head.attention == Attention.MLA else self.gqa
        hidden = residual + attention(p, x, positions)
        residual = hidden
        x = self.norm(f"{p}.post_attention_layernorm", hidden)
        gate = self.linear(f"{p}.mlp.gate_proj", x)
        up = self.linear(f"{p}.mlp.up_proj", x)
        return residual + self.linear(f"{p}.mlp.down_proj", torch.nn.functional.silu(gate) * up)

    def attend(
        self, p: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Layer ``p``'s attention over the keys of its own sequence, causal: q [T, nh, d], k [T, nkv, d],
        v [T, nkv, dv] -> [T, nh * dv]."""
        return _attend(q, k, v, self.attention_scale, positions)

    def gqa(self, p: str, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        t, hd = x.shape[0], self.head.dims.head_dim
        q = self.rotary(self.linear(f"{p}.self_attn.q_proj", x).view(t, -1, hd), positions)
        k = self.rotary(self.linear(f"{p}.self_attn.k_proj", x).view(t, -1, hd), positions)
        v = self.linear(f"{p}.self_attn.v_proj", x).view(t, -1, hd)
        return self.linear(f"{p}.self_attn.o_proj", self.attend(p, q, k, v, positions))

    def mla(self, p: str, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        q, k, v = self.mla_qkv(p, x, positions)
        return self.linear(f"{p}.self_attn.o_proj", self.attend(p, q, k, v, positions))

    def mla_qkv(
        self, p: str, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """MLA's queries, keys and values, every head's [T, heads, d] (see the module's docstring for vLLM's code):
        the keys and values are products of what the KV cache holds, the normed latent and the rotated rope key."""
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
        latent = self.norm(f"{p}.self_attn.kv_a_layernorm", kv_a[:, : d.kv_lora_rank])  # cached
        k_rope = self.rotary(kv_a[:, None, d.kv_lora_rank :], positions)  # cached, one for every head
        kv = self.linear(f"{p}.self_attn.kv_b_proj", latent).view(t, -1, nope + d.v_head_dim)
        heads = q.shape[1]
        q = torch.cat((q[..., :nope], self.rotary(q[..., nope:], positions)), -1)
        k = torch.cat((kv[..., :nope], k_rope.expand(t, heads, rope)), -1)
        return q, k, kv[..., nope:]
