"""The draft head run as the engine chains it: step 1 on the target's hidden states, steps 2..k on its own.

Step 1 at draft position t reads fc(aux states at t) and the token at t + 1, attending causally to step 1 at
every earlier position (what the engine's KV cache holds for the accepted text). Step s > 1 of the chain that
starts at t runs at position t + s - 1 on the pre-norm output of step s - 1 and the next token, attending to
step 1's keys at positions <= t and to its own chain's keys of steps 2..s. All chains run at once, one step at
a time, each reading the tokens the target emitted (where a drafted token differs from them, the chain has
already stopped, so its later steps never count). Sources: vLLM ``v1/spec_decode/llm_base_proposer.py`` (the
drafting loop) and ``model_executor/models/llama_eagle3.py``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from eaglequant.common.errors import InputError
from eaglequant.draft.forward import DraftForward, _rope

# Draft config options vLLM honours that this forward does not implement (llama_eagle3.py, llama.py).
_UNSUPPORTED_OPTIONS = ("norm_before_residual", "norm_output", "rope_scaling")


def unsupported(config: dict[str, Any], attention: str) -> str | None:
    """Why the chained forward cannot run this head as vLLM does (None: it can)."""
    if attention == "mla":
        return "the chained draft forward runs Llama-attention (GQA) heads; this head uses MLA"
    nested = config.get("transformer_layer_config")
    for holder in (config, nested if isinstance(nested, dict) else {}):
        for option in _UNSUPPORTED_OPTIONS:
            if holder.get(option):
                return f"the draft sets {option}, which the chained draft forward does not implement"
    return None


class ChainedDraft(DraftForward):
    """``chain(aux, ids, steps)``: the draft's arg-max (draft ids) at every position, for each step."""

    def chain(self, aux_hidden: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """aux_hidden [T, n_aux * H_t], ids [T] (the token each draft position reads) -> steps x [T] arg-maxes;
        positions past T - s have no token for step s and are left to the caller to ignore."""
        why = unsupported(self.head.config, self.head.attention)
        if why:
            raise InputError(f"acceptance prediction: {why}")
        length = ids.shape[0]
        hidden = self._fc(aux_hidden.to(torch.float32))
        self._keys: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        choices = []
        for step in range(steps):
            tokens = torch.cat((ids[step:], ids.new_zeros(step)))  # step s reads the token s places on
            embeds = self.weight.gather("embed_tokens.weight", tokens).to(torch.float32)
            self._step = step
            positions = torch.arange(length) + step
            for layer in range(self.head.num_layers):
                hidden = self.layer(layer, hidden, embeds, positions)
            logits = self.linear("lm_head", self.norm("norm", hidden))
            choices.append(logits.argmax(-1))
        return choices

    def _fc(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        if "input_norm.weight" in self.present:
            aux_hidden = self.norm("input_norm", aux_hidden)
        if "fc_norm.0.weight" in self.present:
            chunks = aux_hidden.chunk(self.head.dims.num_aux_hidden_states, dim=-1)
            aux_hidden = torch.cat([self.norm(f"fc_norm.{i}", c) for i, c in enumerate(chunks)], -1)
        return self.linear("fc", aux_hidden)

    def gqa(self, p: str, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        dims = self.head.dims
        t, hd = x.shape[0], dims.head_dim
        q = _rope(self.linear(f"{p}.self_attn.q_proj", x).view(t, -1, hd), positions, self.theta)
        k = _rope(self.linear(f"{p}.self_attn.k_proj", x).view(t, -1, hd), positions, self.theta)
        v = self.linear(f"{p}.self_attn.v_proj", x).view(t, -1, hd)
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        cache = self._keys.setdefault(p, [])
        cache.append((k, v))
        scale = 1 / math.sqrt(hd)
        first_k, first_v = cache[0]
        scores = torch.einsum("thd,shd->hts", q, first_k) * scale  # [heads, T, T] against step 1
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        own = [torch.einsum("thd,thd->ht", q, key)[..., None] * scale for key, _ in cache[1:]]
        probs = torch.softmax(torch.cat((scores, *own), -1), -1)
        out = torch.einsum("hts,shd->thd", probs[..., :t], first_v)
        for j, (_, value) in enumerate(cache[1:]):
            out = out + probs[..., t + j].transpose(0, 1)[..., None] * value
        return self.linear(f"{p}.self_attn.o_proj", out.reshape(t, -1))
