"""The worked example of the speed-up model: the full-size Kimi-K2.5 MLA head (its shapes, no weights) against a
Kimi-K2.5-shaped MoE target at TP 8, in vLLM, for the BF16 head, its FP8 draft, and ``search``'s pick on the bundled
MLA pair (its scheme and format, its share of the vocabulary).

The heads are priced from their headers alone, by ``inspect`` (the plan decides which linears vLLM runs quantized);
the target from its ``config.json`` (``fixtures/targets/kimi-k2.5``: the text model's dimensions and its INT4 routed
experts). Acceptance is the seed card's one figure (2.62 tokens a round at k = 3 on
MT-Bench) carried to the other k by :func:`~eaglequant.speedup.model.geometric_acceptance`, the same for every draft:
what a within-budget conversion is meant to keep, not a measurement.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from eaglequant.bench.heads import SyntheticHead, kimi_mla, write_head_headers
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.model import SpeedupTable, Timing, geometric_acceptance, predict_speedup
from eaglequant.speedup.target_step import target_weights

SEED_CARD_ACCEPTANCE = (2.62, 3)  # nvidia's Kimi-K2.5 EAGLE-3 card: MT-Bench, draft length 3
TENSOR_PARALLEL_SIZE = 8
MAX_DRAFT_TOKENS = 8


def with_vocabulary(head: SyntheticHead, vocab: int) -> SyntheticHead:
    """``head`` with a draft vocabulary of ``vocab`` tokens, as ``prune`` writes one: ``lm_head`` cut to those
    rows, and the ``d2t`` map beside it."""
    tensors = [(n, (vocab, s[1]) if n == "lm_head.weight" else s) for n, s in head.tensors] + [("d2t", (vocab,))]
    return replace(head, config={**head.config, "draft_vocab_size": vocab}, tensors=tensors)


def vllm_round(head: SyntheticHead, **options: Any) -> RoundCost:
    """vLLM's round cost of ``head`` converted with ``options`` (none: the BF16 head itself), as ``inspect`` prices
    it from the head's headers (written with no data: a sparse file)."""
    import tempfile

    from eaglequant.api import inspect

    with tempfile.TemporaryDirectory(prefix="eaglequant-speedup-") as tmp:
        write_head_headers(head, Path(tmp))
        if not options:
            (cost,) = inspect(tmp, engines=["vllm"]).round_costs
            return cost.as_source()
        (cost,) = inspect(tmp, engines=["vllm"], **options).round_costs
        return cost


def kimi_tables(target: Path, pick: dict[str, Any], timing: Timing | None = None) -> list[SpeedupTable]:
    """The example's tables: the BF16 head, FP8 per channel (Quark), and ``pick`` (a scheme, format and
    optionally ``vocab``), each at k = 1..8."""
    weights = target_weights(target, TENSOR_PARALLEL_SIZE)
    length, at = SEED_CARD_ACCEPTANCE
    acceptance = geometric_acceptance(length, at, MAX_DRAFT_TOKENS)
    said = f"{length} at k = {at} (the seed card's MT-Bench figure), carried to other k at a constant per-token rate"
    head = kimi_mla()
    options = {key: value for key, value in pick.items() if key != "vocab"}
    picked_head = with_vocabulary(head, pick["vocab"]) if pick.get("vocab") else head
    drafts = [
        ("BF16", vllm_round(head)),
        ("FP8 per channel / quark", vllm_round(head, scheme="fp8-per-channel", format="quark")),
        (pick_name(pick), vllm_round(picked_head, **options)),
    ]
    return [predict_speedup(name, weights, cost, acceptance, timing, said) for name, cost in drafts]


def pick_name(pick: dict[str, Any]) -> str:
    vocab = f", vocabulary {pick['vocab']:,}" if pick.get("vocab") else ""
    return f"{pick['scheme']} / {pick['format']}{vocab}"
