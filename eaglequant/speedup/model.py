"""The decode speed-up a draft gives its target, predicted: acceptance(k) x t_step / (t_verify(k) + t_draft(k)).

- ``t_step``: one decode step of the target alone, a forward over 1 token.
- ``t_verify(k)``: the target's forward over the k + 1 tokens a round verifies. It reads the same dense weights as
  a step, but a MoE layer reads every expert one of the k + 1 tokens is routed to
  (:meth:`~.target_step.TargetWeights.distinct_experts`), so on a MoE target it costs several steps' expert bytes.
- ``t_draft(k)``: the draft's k steps, the weight bytes a round reads (:mod:`eaglequant.readback.cost`).

Each forward costs its bytes over the bandwidth plus a fixed overhead (launches, synchronisation, all-reduces), and a
round a fixed overhead of its own beside its forwards (the rejection sampler, the proposer's bookkeeping), counted in
``t_verify``. Those are the model's free terms: stated (:func:`stated_timing`, printed beside every figure) or
calibrated on what an engine measured (:func:`calibrate`), which then predicts the other k and the other drafts on
that engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.target_step import TargetWeights, expected_experts_text


@dataclass(frozen=True)
class Timing(JsonRecord):
    """The model's free terms: what a byte and a forward cost."""

    bandwidth: float  # bytes a second one rank reads weights at
    target_overhead_s: float  # each target forward, beyond its bytes
    draft_overhead_s: float  # each draft step, beyond its bytes
    round_overhead_s: float = 0.0  # each speculative round, beyond its forwards
    context: int = 2048  # tokens of context whose cache a forward reads
    calibrated_on: str | None = None  # what the overheads were fitted to (None: stated)

    def assumptions(self) -> list[str]:
        """The terms in words, for printing beside the figures."""
        fitted = (
            f" (fitted to {self.calibrated_on})"
            if self.calibrated_on
            else f" (stated: a forward {FORWARD_OVERHEAD_S * 1e3:g} ms and {LAYER_OVERHEAD_S * 1e6:g} us a layer, a "
            f"round {ROUND_OVERHEAD_S * 1e3:g} ms; --measured fits them)"
        )
        return [
            f"weights and cache read at {self.bandwidth / 1e12:.3g} TB/s a rank",
            f"a fixed {self.target_overhead_s * 1e3:.3g} ms each target forward, {self.draft_overhead_s * 1e3:.3g} ms "
            f"each draft step and {self.round_overhead_s * 1e3:.3g} ms each round beyond their bytes{fitted}",
            f"batch 1 at {self.context} tokens of context",
        ]


# The stated defaults, printed with every figure: an H100 SXM's HBM3, each forward a fixed 0.1 ms (scheduling,
# sampling) and 25 us a decoder layer (kernel launches, the all-reduces of tensor parallelism), and each round 0.1 ms
# (the rejection sampler, the proposer's bookkeeping).
BANDWIDTH = 3.35e12
FORWARD_OVERHEAD_S = 1e-4
LAYER_OVERHEAD_S = 2.5e-5
ROUND_OVERHEAD_S = 1e-4


def stated_timing(target: TargetWeights, draft_layers: int = 1, context: int = 2048) -> Timing:
    """The stated terms for ``target`` and a draft of ``draft_layers`` decoder layers (EAGLE-3 heads have one)."""
    return Timing(
        BANDWIDTH,
        FORWARD_OVERHEAD_S + target.layers * LAYER_OVERHEAD_S,
        FORWARD_OVERHEAD_S + draft_layers * LAYER_OVERHEAD_S,
        ROUND_OVERHEAD_S,
        context,
    )


# The model's error, a share either way: the largest the calibration measured away from its point (docs/speedup.md).
MODEL_ERROR = 0.12

MODEL_ASSUMPTIONS = (
    "each token routed to its experts independently and uniformly",
    "tensor parallelism shards every weight (experts too) across ranks; the draft runs on as many ranks",
    "the draft's own cache is not counted",
    f"a predicted speed-up's interval: ±{MODEL_ERROR:.0%}, the largest error the calibration measured away from "
    "its point",
)


@dataclass(frozen=True)
class SpeedupPoint(JsonRecord):
    """The predicted speed-up at one k, with the times it is made of."""

    json_values = named(
        acceptance_length=rounded(4),
        step_s=rounded(7),
        verify_s=rounded(7),
        draft_s=rounded(7),
        speedup=rounded(4),
        low=lambda value: None if value is None else round(value, 4),
        high=lambda value: None if value is None else round(value, 4),
    )

    draft_tokens: int
    acceptance_length: float
    step_s: float
    verify_s: float
    draft_s: float
    speedup: float
    low: float | None = None  # the predicted speed-up's interval (None: not estimated)
    high: float | None = None


@dataclass(frozen=True)
class SpeedupTable(JsonRecord):
    """One draft on one target: the predicted speed-up at each k, and everything it assumed."""

    json_computed = ("best_draft_tokens", "assumptions")

    draft: str
    target: TargetWeights
    timing: Timing
    points: tuple[SpeedupPoint, ...]
    acceptance_from: str  # where acceptance(k) came from, in words
    concurrency: int = 1  # sequences decoded together

    @property
    def best(self) -> SpeedupPoint:
        """The k with the highest predicted speed-up (the smaller k on a tie)."""
        return max(self.points, key=lambda p: (p.speedup, -p.draft_tokens))

    @property
    def best_draft_tokens(self) -> int:
        return self.best.draft_tokens

    @property
    def assumptions(self) -> list[str]:
        verify = [
            f"a k = {p.draft_tokens} verification reads {expected_experts_text(self.target, p.draft_tokens + 1)} "
            "experts a MoE layer"
            for p in self.points[:1] + self.points[-1:]
        ]
        moe = verify if self.target.moe_layers else []
        return [*self.timing.assumptions(), *MODEL_ASSUMPTIONS, *moe, f"acceptance: {self.acceptance_from}"]

    def at(self, draft_tokens: int) -> SpeedupPoint | None:
        return next((p for p in self.points if p.draft_tokens == draft_tokens), None)


def step_seconds(target: TargetWeights, timing: Timing, tokens: int = 1) -> float:
    """A target forward over ``tokens`` tokens."""
    return target.forward_bytes(tokens, timing.context) / timing.bandwidth + timing.target_overhead_s


def draft_seconds(draft: RoundCost, draft_tokens: int, timing: Timing, ranks: int) -> float:
    """The draft's ``draft_tokens`` steps of one round."""
    return draft.at(draft_tokens).bytes_per_round / ranks / timing.bandwidth + draft_tokens * timing.draft_overhead_s


def predict_speedup(
    draft_name: str,
    target: TargetWeights,
    draft: RoundCost,
    acceptance: Mapping[int, float],
    timing: Timing | None = None,
    acceptance_from: str = "given",
    *,
    concurrency: int = 1,
) -> SpeedupTable:
    """The speed-up at each k ``acceptance`` gives a length for (k -> acceptance length); ``timing``: the stated
    terms unless given; ``concurrency``: the sequences decoded together (batch 1 only, so far)."""
    if not acceptance:
        raise InputError("no acceptance length to predict a speed-up from", hint="predict it: verify DST --inputs CAP")
    if concurrency != 1:
        raise InputError(
            f"concurrency {concurrency}: the speed-up model predicts batch 1 only", hint="predict at concurrency 1"
        )
    timing = timing or stated_timing(target)
    step = step_seconds(target, timing)
    points = []
    for k in sorted(acceptance):
        verify = step_seconds(target, timing, k + 1) + timing.round_overhead_s
        drafting = draft_seconds(draft, k, timing, target.tensor_parallel_size)
        length = acceptance[k]
        speedup = length * step / (verify + drafting)
        low, high = speedup * (1 - MODEL_ERROR), speedup * (1 + MODEL_ERROR)
        points.append(SpeedupPoint(k, length, step, verify, drafting, speedup, low, high))
    return SpeedupTable(draft_name, target, timing, tuple(points), acceptance_from, concurrency)


class MeasuredRound(Protocol):
    """What an engine measured at one k (``eaglequant accept``): the acceptance length, and the decode seconds a
    token with the target alone and with the draft."""

    @property
    def draft_tokens(self) -> int: ...
    @property
    def acceptance_length(self) -> float: ...
    @property
    def alone_seconds_per_token(self) -> float: ...
    @property
    def drafted_seconds_per_token(self) -> float: ...


def calibrate(
    target: TargetWeights, draft: RoundCost, measured: Sequence[MeasuredRound], stated: Timing, what: str
) -> Timing:
    """``stated`` with its overheads fitted to ``measured``. The target's comes from its decode alone (a step is one
    forward). What a round costs beyond its verification's forward and its draft's bytes (the acceptance length
    times the seconds a token with the draft, less those) is a fixed cost a round plus one a draft step: measured at
    two k or more, both are fitted in least squares; at one k the two cannot be told apart, so they keep the
    proportion ``stated`` gives them and their scale is fitted. The bandwidth stays as stated: one engine's times on
    one target cannot tell a byte's cost from a forward's."""
    if not measured:
        raise InputError(f"{what}: no draft measured at any k to calibrate on", hint="measure with eaglequant accept")
    bandwidth, context = stated.bandwidth, stated.context
    step_bytes = target.forward_bytes(1, context) / bandwidth
    target_overhead = max(0.0, sum(m.alone_seconds_per_token for m in measured) / len(measured) - step_bytes)
    bare = Timing(bandwidth, target_overhead, 0.0, 0.0, context)
    rounds = []  # (k, seconds a round beyond its verification's forward and its draft's bytes)
    for m in measured:
        k = m.draft_tokens
        spent = m.acceptance_length * m.drafted_seconds_per_token
        rest = spent - step_seconds(target, bare, k + 1) - draft_seconds(draft, k, bare, target.tensor_parallel_size)
        rounds.append((k, rest))
    if not all(math.isfinite(rest) for _, rest in rounds):
        raise InputError(f"{what}: the measured times are not finite", hint="measure again with eaglequant accept")
    per_round, per_step = _fixed_and_per_step(rounds, stated.round_overhead_s, stated.draft_overhead_s)
    return Timing(bandwidth, target_overhead, per_step, per_round, context, what)


def _fixed_and_per_step(
    rounds: list[tuple[int, float]], stated_fixed: float, stated_step: float
) -> tuple[float, float]:
    """``rest = fixed + k * per_step`` fitted to the rounds in least squares, neither negative; at one k, the two in
    the stated proportion, scaled to fit."""
    ks = [k for k, _ in rounds]
    mean_k, mean_rest = sum(ks) / len(ks), sum(rest for _, rest in rounds) / len(rounds)
    spread = sum((k - mean_k) ** 2 for k in ks)
    if spread == 0:
        scale = max(0.0, mean_rest) / (stated_fixed + mean_k * stated_step)
        return scale * stated_fixed, scale * stated_step
    per_step = sum((k - mean_k) * (rest - mean_rest) for k, rest in rounds) / spread
    if per_step < 0:
        return max(0.0, mean_rest), 0.0
    fixed = mean_rest - per_step * mean_k
    if fixed < 0:
        return 0.0, sum(k * rest for k, rest in rounds) / sum(k * k for k in ks)
    return fixed, per_step


def geometric_acceptance(length: float, draft_tokens: int, up_to: int) -> dict[int, float]:
    """Acceptance length at k = 1..``up_to`` from one measured at ``draft_tokens``, each drafted token accepted with
    the same chance a given its predecessors were (so a length of ``(1 - a ** (k + 1)) / (1 - a)``): what a model
    card's one figure allows, and said so wherever it is used."""
    if not 1.0 <= length <= draft_tokens + 1:
        raise InputError(
            f"acceptance length {length:g} at k = {draft_tokens}: must be from 1 to {draft_tokens + 1}",
            hint="give the tokens a round emits, e.g. 2.62@3",
        )

    def at(rate: float, k: int) -> float:
        return float(k + 1) if rate >= 1.0 else (1.0 - rate ** (k + 1)) / (1.0 - rate)

    if length == draft_tokens + 1:
        return {k: float(k + 1) for k in range(1, up_to + 1)}
    low, high = 0.0, 1.0
    for _ in range(100):  # bisection: the length grows with the rate
        middle = (low + high) / 2
        low, high = (middle, high) if at(middle, draft_tokens) < length else (low, middle)
    rate = (low + high) / 2
    return {k: at(rate, k) for k in range(1, up_to + 1)}
