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

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eaglequant.bench.heads import SyntheticHead, kimi_mla, write_head_headers
from eaglequant.readback.cost import SERVING_WEIGHT_BYTES, RoundCost
from eaglequant.speedup.model import SpeedupPoint, SpeedupTable, Timing, geometric_acceptance, predict_speedup
from eaglequant.speedup.target_step import TargetWeights, kv_bytes_per_position, target_weights

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

    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
    from eaglequant.conversion.inspection import inspect_source
    from eaglequant.conversion.options import ConversionOptions

    with tempfile.TemporaryDirectory(prefix="eaglequant-speedup-") as tmp:
        write_head_headers(head, Path(tmp))
        (cost,) = inspect_source(tmp, ConversionOptions(engines=("vllm",), **options), DEFAULT_DRAFT_TOKENS).round_costs
        return cost if options else cost.as_source()


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


# The AMD card (amd/Kimi-K2.5-Eagle3-FP8): Kimi-K2.5-MXFP4 on one MI355X node, TP 4, the draft on 1 rank, k = 6,
# ISL/OSL 1K/1K sampled at a range ratio of 0.8; decode tokens/s per GPU against concurrency.
AMD_CARD = {  # concurrency: (no speculation, BF16 draft, FP8 draft), tokens/s per GPU
    4: (82.7, 157.0, 165.2),
    8: (142.2, 269.1, 270.1),
    16: (220.5, 399.6, 412.7),
    32: (342.2, 627.6, 633.8),
    64: (533.3, 901.6, 936.6),
}
AMD_GPUS, AMD_DRAFT_TP, AMD_K, AMD_CONTEXT = 4, 1, 6, 1536  # 1K prompt, half of the 1K output on average
MXFP4_BYTES_A_WEIGHT = 4.25 / 8  # a 4-bit value and one 8-bit E8M0 scale each 32


@dataclass(frozen=True)
class CardRow:
    """One concurrency of the card: what it measured, and what the model fitted at one concurrency predicts."""

    concurrency: int
    alone_measured: float  # tokens/s per GPU
    alone_predicted: float
    bf16_measured: float  # speed-up over no speculation
    bf16_predicted: SpeedupPoint
    fp8_measured: float
    fp8_predicted: SpeedupPoint


def mxfp4_kimi(target: Path, tensor_parallel_size: int) -> TargetWeights:
    """A Kimi-K2.5-MXFP4-shaped target from the bundled Kimi-K2.5 config: its routed experts at MXFP4's bytes and
    run in fp4 (the card's FP4 ASM GEMM), everything else BF16, with the parameters each token is multiplied
    through counted from the config (the pricing builders' fields, filled here until they fill them)."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.engines.served_length import text_config

    config = text_config(load_json_object(target / "config.json", "config.json"))
    weights = target_weights(target, tensor_parallel_size)
    hidden = config["hidden_size"]
    expert_params = 3 * hidden * config["moe_intermediate_size"]
    routed_total = weights.moe_layers * weights.experts * expert_params
    dense_params = round(weights.dense_bytes / SERVING_WEIGHT_BYTES)  # every dense weight is BF16 in this config
    assert routed_total > 0 and dense_params > 0
    return replace(
        weights,
        name="Kimi-K2.5-MXFP4-shaped",
        expert_bytes=expert_params * MXFP4_BYTES_A_WEIGHT,
        dense_params=dense_params,
        expert_params=expert_params,
        expert_compute="fp4",
    )


@dataclass(frozen=True)
class CardRound:
    """The card's BF16 draft at one concurrency, as a calibration reads a measurement."""

    draft_tokens: int
    acceptance_length: float
    alone_seconds_per_token: float
    drafted_seconds_per_token: float


def _seconds_a_token(per_gpu: float, concurrency: int) -> float:
    """A sequence's seconds a token from a card's tokens/s per GPU (all sequences, all GPUs)."""
    return concurrency / (per_gpu * AMD_GPUS)


def amd_card(
    target: Path,
    fit_at: int = 4,
    locality: float | None = None,
    *,
    token_share: float | None = None,
    per_token: bool = True,
) -> tuple[Timing, list[CardRow]]:
    """The model fitted to the card, then every concurrency and the FP8 column predicted. With ``per_token``, the
    target forward's fixed overhead and its cost a sequence to the no-speculation column at every concurrency (the
    target alone), then at ``fit_at`` alone, from the BF16 draft's rate: the share of that cost each token pays
    (``token_share`` None; the round's overheads stated), or the round's overheads (the share given). Without, the
    fixed overhead to the no-speculation rate at ``fit_at`` and the round's to the BF16 draft's, as before the cost
    a token. Acceptance: the NVIDIA card's 2.62 at k = 3 carried to k = 6 (the AMD card gives none)."""
    from eaglequant.bench.heads import llama_head
    from eaglequant.speedup.hardware import accelerator
    from eaglequant.speedup.model import (
        ROUTING_LOCALITY,
        calibrate,
        calibrate_target_steps,
        calibrate_token_share,
        stated_timing,
    )

    weights = mxfp4_kimi(target, AMD_GPUS)
    length = geometric_acceptance(*SEED_CARD_ACCEPTANCE, AMD_K)[AMD_K]
    rho = ROUTING_LOCALITY if locality is None else locality
    stated = stated_timing(weights, context=AMD_CONTEXT, hardware=accelerator("mi355x"), routing_locality=rho)
    fit = calibrate
    if per_token:
        steps = {c: _seconds_a_token(rates[0], c) for c, rates in AMD_CARD.items()}  # a step: a token a sequence
        share = 1.0 if token_share is None else token_share
        stated = calibrate_target_steps(weights, stated, steps, "the AMD card's no-speculation column", share)
        fit = calibrate_token_share if token_share is None else calibrate
    head = llama_head()
    bf16, fp8 = vllm_round(head), vllm_round(head, scheme="fp8-per-channel", format="quark")
    kv = kv_bytes_per_position(head.config)[0]  # the draft's own cache (64 KV heads of 128, one layer)
    alone, drafted, _ = AMD_CARD[fit_at]
    measured = CardRound(AMD_K, length, _seconds_a_token(alone, fit_at), _seconds_a_token(drafted, fit_at))
    what = f"the AMD card's BF16 draft at C = {fit_at}"
    timing = fit(weights, bf16, [measured], stated, what, concurrency=fit_at, draft_tensor_parallel_size=1,
                 draft_kv_bytes_per_position=kv)  # fmt: skip
    rows = []
    for c, (alone, bf16_rate, fp8_rate) in AMD_CARD.items():
        predicted = [
            predict_speedup(name, weights, cost, {AMD_K: length}, timing, concurrency=c, draft_tensor_parallel_size=1,
                            draft_compute=kind, draft_kv_bytes_per_position=kv).points[0]
            for name, cost, kind in (("BF16", bf16, "bf16"), ("FP8", fp8, "fp8"))
        ]  # fmt: skip
        alone_predicted = c / predicted[0].step_s / AMD_GPUS
        rows.append(CardRow(c, alone, alone_predicted, bf16_rate / alone, predicted[0], fp8_rate / alone, predicted[1]))
    return timing, rows


@dataclass(frozen=True)
class FitPoint:
    """The card's model fitted at one concurrency of the BF16 column: the token share there, how far 1% of the
    card's figure moves it, and the largest error over every other C (None where the fit is refused)."""

    concurrency: int
    share: float | None
    share_per_percent: float | None
    worst_bf16: float | None
    worst_fp8: float | None
    refused: str = ""


def fit_points(target: Path, locality: float | None = None) -> list[FitPoint]:
    """:func:`amd_card` fitted at each concurrency the card measured in turn: which fit point fixes the token share,
    and how the predictions hold wherever it is fitted (nothing hidden by the choice of one)."""
    from eaglequant.common.errors import InputError

    points = []
    for c in AMD_CARD:
        try:
            timing, rows = amd_card(target, c, locality)
        except InputError as refused:
            points.append(FitPoint(c, None, None, None, None, str(refused)))
            continue
        per_sequence = timing.token_overhead_s + timing.sequence_overhead_s
        points.append(
            FitPoint(
                c, timing.token_overhead_s / per_sequence, timing.token_share_per_percent,
                max(abs(r.bf16_predicted.speedup / r.bf16_measured - 1) for r in rows),
                max(abs(r.fp8_predicted.speedup / r.fp8_measured - 1) for r in rows),
            )
        )  # fmt: skip
    return points
