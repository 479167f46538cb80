"""The draft head run as the engine chains it: step 1 on the target's hidden states, steps 2..k on its own.

Step 1 at draft position t reads fc(aux states at t) and the token at t + 1, attending causally to step 1 at
every earlier position (what the engine's KV cache holds for the accepted text). Step s > 1 of the chain that
starts at t runs at position t + s - 1 on the pre-norm output of step s - 1 and the next token, attending to
step 1's keys at positions <= t and to its own chain's keys of steps 2..s. All chains run at once, one step at
a time, each reading the tokens the target emitted (where a drafted token differs from them, the chain has
already stopped, so its later steps never count). Sources: vLLM ``v1/spec_decode/llm_base_proposer.py`` (the
drafting loop), ``model_executor/models/llama_eagle3.py`` (Llama GQA heads) and ``deepseek_eagle3.py`` (MLA
heads: ``DeepseekV2Eagle3DecoderLayer``, the same residual and norms around ``DeepseekV2MLAAttention``).

The attention is the single-step forward's (:class:`~eaglequant.draft.forward.DraftForward`: projections, RoPE
and softmax scale); only the keys it reads are the chain's. For MLA the engine's cache holds, per layer and
position, the normed latent ``kv_c`` and the rotated rope key ``k_pe`` (``layers/attention/mla_attention.py``);
step s reads step 1's entries at positions <= t and its own chain's of steps 2..s, and every head's key and value
are ``kv_b_proj`` products of them, so the keys and values cached here per step are the same numbers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from eaglequant.common.errors import InputError, given, suggested, words
from eaglequant.draft.forward import DraftForward, rope_scaling
from eaglequant.layouts.head import Attention

if TYPE_CHECKING:
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.head import HeadDescription
    from eaglequant.prediction.shared import ChainInputs

# Draft config options vLLM honours that this forward does not implement (llama_eagle3.py, llama.py,
# deepseek_eagle3.py, deepseek_v2.py).
_UNSUPPORTED_OPTIONS = ("norm_before_residual", "norm_output")
_UNSUPPORTED_MLA_OPTIONS = ("index_topk",)  # DeepSeek-V3.2's sparse attention


def unsupported(config: dict[str, Any], attention: Attention) -> str | None:
    """Why the chained forward cannot run this head as vLLM does (None: it can)."""
    nested = config.get("transformer_layer_config")
    holders = (config, nested if isinstance(nested, dict) else {})
    mla = attention == Attention.MLA
    options = _UNSUPPORTED_OPTIONS + (_UNSUPPORTED_MLA_OPTIONS if mla else ("rope_scaling",))
    for holder in holders:
        for option in options:
            if holder.get(option):
                return f"the draft sets {option}, which the chained draft forward does not implement"
    scaling = rope_scaling(config) if mla else None
    if scaling is not None and ("factor" not in scaling or scaling.get("is_deepseek_v4")):
        return "the draft's rope_scaling is not the DeepSeek yarn scaling the chained draft forward implements"
    return None


def _chained_attention(q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]], scale: float) -> torch.Tensor:
    """q [T, nh, d] of step len(cache) against step 1's keys at positions <= t (causal) and the same chain's keys
    of steps 2..s (the same row of each later step) -> [T, nh * dv]."""
    t, heads = q.shape[:2]

    def widened(x: torch.Tensor) -> torch.Tensor:  # GQA: each key head serves heads / kv_heads query heads
        return x.repeat_interleave(heads // x.shape[1], dim=1)

    keys = [(widened(k), widened(v)) for k, v in cache]
    first_k, first_v = keys[0]
    scores = torch.einsum("thd,shd->hts", q, first_k) * scale  # [heads, T, T] against step 1
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    own = [torch.einsum("thd,thd->ht", q, key)[..., None] * scale for key, _ in keys[1:]]
    probs = torch.softmax(torch.cat((scores, *own), -1), -1)
    out = torch.einsum("hts,shd->thd", probs[..., :t], first_v)
    for j, (_, value) in enumerate(keys[1:]):
        out = out + probs[..., t + j].transpose(0, 1)[..., None] * value
    return out.reshape(t, -1)


def check_device(device: str) -> str:
    """``cpu``, or ``cuda`` where torch sees a CUDA device; anything else is one line (exit 2)."""
    if device == "cpu":
        return device
    if device != "cuda" and not device.startswith("cuda:"):
        raise InputError(words(given("device", device), ": not a device"), hint="use cpu or cuda")
    if not torch.cuda.is_available():
        raise InputError(
            words(given("device", device), ": torch sees no CUDA device here"),
            hint=words("predict on the CPU: ", suggested("device", "cpu")),
        )
    return device


class DeviceWeights:
    """The head's tensors held whole on a device as float32, each read once on first use: the chain's products run
    there instead of a block of rows at a time from the file. Answers what :class:`CanonicalWeights` answers."""

    def __init__(self, weights: CanonicalWeights, device: str) -> None:
        self.source, self.device, self.names = weights, torch.device(device), weights.names
        self._held: dict[str, torch.Tensor] = {}

    def __call__(self, name: str) -> torch.Tensor:
        if name not in self._held:
            self._held[name] = self.source(name).to(self.device, torch.float32)
        return self._held[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.source.shape(name)

    def dtype(self, name: str) -> str:
        return self.source.dtype(name)

    def rows(self, name: str, rows: slice) -> torch.Tensor:
        return self(name)[rows]

    def row_blocks(self, name: str, align: int = 1) -> list[slice]:
        return [slice(0, self.shape(name)[0])]

    def gather(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        return self(name)[ids.to(self.device)]


class ChainedDraft(DraftForward):
    """``chain(aux, ids, draft_tokens)``: the draft's arg-max (draft ids) at every position, for each step; on
    ``device`` (``cuda``: the weights held there, :class:`DeviceWeights`)."""

    def __init__(
        self, head: HeadDescription, weight: CanonicalWeights, device: str = "cpu", held: bool | None = None
    ) -> None:
        """``held``: the weights held whole on ``device`` (default: off the CPU only, where they stream from the
        file a block of rows at a time)."""
        device = check_device(device)
        held = device != "cpu" if held is None else held
        super().__init__(head, DeviceWeights(weight, device) if held else weight)  # type: ignore[arg-type]
        self.device = torch.device(device)
        if held:
            self.linear = self.device_linear
            self.rotary = replace(self.rotary, inv_freq=self.rotary.inv_freq.to(self.device))

    def device_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """float32 x @ W^T with W whole on the device."""
        return x @ self.weight(f"{module}.weight").T

    def fc_of(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        return super().fc_of(aux_hidden.to(self.device))

    def chain(
        self, aux_hidden: torch.Tensor, ids: torch.Tensor, draft_tokens: int, inputs: ChainInputs | None = None
    ) -> list[torch.Tensor]:
        """aux_hidden [T, n_aux * H_t], ids [T] (the token each draft position reads) -> draft_tokens x [T] arg-maxes;
        positions past T - s have no token for step s and are left to the caller to ignore. ``inputs``: ``fc`` of
        ``aux_hidden`` and each step's embeddings, already computed (by a draft with the same tensors there)."""
        return [logits.argmax(-1) for logits in self.chain_logits(aux_hidden, ids, draft_tokens, inputs)]

    def chain_logits(
        self, aux_hidden: torch.Tensor, ids: torch.Tensor, draft_tokens: int, inputs: ChainInputs | None = None
    ) -> list[torch.Tensor]:
        """The draft's logits [T, V_draft] at every position, for each step of the chain."""
        why = unsupported(self.head.config, self.head.attention)
        if why:
            raise InputError(f"acceptance prediction: {why}")
        length, ids = ids.shape[0], ids.to(self.device)
        hidden = self.fc_of(aux_hidden) if inputs is None else inputs.fc
        self._keys: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        logits = []
        for step in range(draft_tokens):
            embeds = self.step_embeds(ids, step) if inputs is None else inputs.embeds[step]
            positions = torch.arange(length, device=self.device) + step
            for layer in range(self.head.num_layers):
                hidden = self.layer(layer, hidden, embeds, positions)
            logits.append(self.linear("lm_head", self.norm("norm", hidden)))
        return logits

    def step_embeds(self, ids: torch.Tensor, step: int) -> torch.Tensor:
        """The embeddings step ``step`` reads: of the token ``step`` places on from each position."""
        ids = ids.to(self.device)
        tokens = torch.cat((ids[step:], ids.new_zeros(step)))
        return self.weight.gather("embed_tokens.weight", tokens).to(torch.float32)

    def attend(
        self, p: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Layer ``p``'s keys and values of this step join its cache; q attends to what the chain reads there."""
        cache = self._keys.setdefault(p, [])
        cache.append((k, v))
        return _chained_attention(q, cache, self.attention_scale)
