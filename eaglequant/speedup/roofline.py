"""What a forward computes, in seconds at the accelerator's peak: 2 multiply-adds a weight a token, each GEMM at the
peak of the kind it runs in. A forward costs the larger of its bytes' time and this (a roofline), plus overheads.

Attention over the context is not counted as compute (at decode it is bound by the cache's bytes, which are), nor
is a kernel's distance from the peak: the peak is an upper bound on speed, so this is a lower bound on time.
"""

from __future__ import annotations

from eaglequant.readback.cost import SERVING_WEIGHT_BYTES, RoundCost
from eaglequant.speedup.hardware import Accelerator
from eaglequant.speedup.target_step import TargetWeights


def target_compute_seconds(target: TargetWeights, hardware: Accelerator, tokens: int) -> float:
    """The busiest rank's GEMMs in a forward over ``tokens`` tokens (all sequences together): the dense weights for
    every token, and ``top_k`` routed experts a token in each MoE layer, spread over the ranks that hold them."""
    dense = 2.0 * target.dense_params * tokens / target.tensor_parallel_size
    routed = 2.0 * target.expert_params * target.experts_per_token * target.moe_layers * tokens
    expert_ranks = target.expert_parallel_size if target.expert_parallel_size > 1 else target.tensor_parallel_size
    return dense / hardware.peak(target.dense_compute) + routed / expert_ranks / hardware.peak(target.expert_compute)


def draft_params_per_round(draft: RoundCost) -> float:
    """The weights a round of ``draft`` multiplies each sequence's tokens through (its source's parameters, each
    read counted; the embedding is a lookup, not a GEMM)."""
    return sum(part.source_bytes_per_round / SERVING_WEIGHT_BYTES for part in draft.parts if part.part != "embedding")


def draft_compute_seconds(
    draft: RoundCost, hardware: Accelerator, sequences: int, ranks: int, kind: str = "bf16"
) -> float:
    """A round's draft GEMMs for ``sequences`` sequences on ``ranks`` ranks, in ``kind`` (the kind its quantized
    linears run in; bf16 is the bound where they run in a narrower one)."""
    return 2.0 * draft_params_per_round(draft) * sequences / ranks / hardware.peak(kind)
