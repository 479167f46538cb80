"""The decode speed-up a draft gives its target, predicted: acceptance(k) x t_step / (t_verify(k) + t_draft(k)).

- ``t_step``: one decode step of the target alone, a forward over 1 token.
- ``t_verify(k)``: the target's forward over the k + 1 tokens a round verifies. It reads the same dense weights as
  a step, but a MoE layer reads every expert one of the k + 1 tokens is routed to
  (:meth:`~.target_step.TargetWeights.distinct_experts`), so on a MoE target it costs several steps' expert bytes.
- ``t_draft(k)``: the draft's k steps, the weight bytes a round reads (:mod:`eaglequant.readback.cost`).

Each forward costs its bytes over the bandwidth plus a fixed overhead (launches, synchronisation, all-reduces).
Those are the model's free terms: stated (:func:`stated_timing`, printed beside every figure) or calibrated on what an
engine measured (:func:`calibrate`), which then predicts the other k and the other drafts on that engine.
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
    context: int = 2048  # tokens of context whose cache a forward reads
    calibrated_on: str | None = None  # what the overheads were fitted to (None: stated)

    def assumptions(self) -> list[str]:
        """The terms in words, for printing beside the figures."""
        fitted = (
            f" (fitted to {self.calibrated_on})"
            if self.calibrated_on
            else f" (stated: {FORWARD_OVERHEAD_S * 1e3:g} ms and {LAYER_OVERHEAD_S * 1e6:g} us a layer; "
            "--measured fits them)"
        )
        return [
            f"weights and cache read at {self.bandwidth / 1e12:.3g} TB/s a rank",
            f"a fixed {self.target_overhead_s * 1e3:.3g} ms each target forward and {self.draft_overhead_s * 1e3:.3g} "
            f"ms each draft step beyond their bytes{fitted}",
            f"batch 1 at {self.context} tokens of context",
        ]


# The stated defaults, printed with every figure: an H100 SXM's HBM3, and each forward a fixed 0.1 ms (scheduling,
# sampling) and 25 us a decoder layer (kernel launches, the all-reduces of tensor parallelism).
BANDWIDTH = 3.35e12
FORWARD_OVERHEAD_S = 1e-4
LAYER_OVERHEAD_S = 2.5e-5


def stated_timing(target: TargetWeights, draft_layers: int = 1, context: int = 2048) -> Timing:
    """The stated terms for ``target`` and a draft of ``draft_layers`` decoder layers (EAGLE-3 heads have one)."""
    return Timing(
        BANDWIDTH,
        FORWARD_OVERHEAD_S + target.layers * LAYER_OVERHEAD_S,
        FORWARD_OVERHEAD_S + draft_layers * LAYER_OVERHEAD_S,
        context,
    )


MODEL_ASSUMPTIONS = (
    "each token routed to its experts independently and uniformly",
    "tensor parallelism shards every weight (experts too) across ranks; the draft runs on as many ranks",
    "the draft's own cache is not counted",
)


@dataclass(frozen=True)
class SpeedupPoint(JsonRecord):
    """The predicted speed-up at one k, with the times it is made of."""

    json_values = named(
        acceptance_length=rounded(4), step_s=rounded(7), verify_s=rounded(7), draft_s=rounded(7), speedup=rounded(4)
    )

    draft_tokens: int
    acceptance_length: float
    step_s: float
    verify_s: float
    draft_s: float
    speedup: float


@dataclass(frozen=True)
class SpeedupTable(JsonRecord):
    """One draft on one target: the predicted speed-up at each k, and everything it assumed."""

    json_computed = ("best_draft_tokens", "assumptions")
    json_values = named(target="_target_json")

    draft: str
    target: TargetWeights
    timing: Timing
    points: tuple[SpeedupPoint, ...]
    acceptance_from: str  # where acceptance(k) came from, in words

    def _target_json(self, target: TargetWeights) -> dict[str, object]:
        return target.to_json()

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
) -> SpeedupTable:
    """The speed-up at each k ``acceptance`` gives a length for (k -> acceptance length); ``timing``: the stated
    terms unless given."""
    if not acceptance:
        raise InputError("no acceptance length to predict a speed-up from", hint="predict it: verify DST --inputs CAP")
    timing = timing or stated_timing(target)
    step = step_seconds(target, timing)
    points = []
    for k in sorted(acceptance):
        verify = step_seconds(target, timing, k + 1)
        drafting = draft_seconds(draft, k, timing, target.tensor_parallel_size)
        length = acceptance[k]
        points.append(SpeedupPoint(k, length, step, verify, drafting, length * step / (verify + drafting)))
    return SpeedupTable(draft_name, target, timing, tuple(points), acceptance_from)


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
    """``stated`` with its overheads fitted to ``measured``: the target's from its decode alone (a step is one
    forward), the draft's from each round's time (the acceptance length times the time a token with the draft)
    less the verification, in least squares over the rounds. The bandwidth stays as stated: one engine's times
    cannot tell a byte's cost from a forward's on one target."""
    if not measured:
        raise InputError(f"{what}: no draft measured at any k to calibrate on", hint="measure with eaglequant accept")
    bandwidth, context = stated.bandwidth, stated.context
    step_bytes = target.forward_bytes(1, context) / bandwidth
    target_overhead = max(0.0, sum(m.alone_seconds_per_token for m in measured) / len(measured) - step_bytes)
    fitted = Timing(bandwidth, target_overhead, 0.0, context)
    residuals, weights = 0.0, 0.0
    for m in measured:
        k = m.draft_tokens
        round_s = m.acceptance_length * m.drafted_seconds_per_token
        drafting = draft_seconds(draft, k, fitted, target.tensor_parallel_size)
        rest = round_s - step_seconds(target, fitted, k + 1) - drafting
        residuals += k * rest
        weights += k * k
    draft_overhead = max(0.0, residuals / weights)
    if not math.isfinite(draft_overhead):
        raise InputError(f"{what}: the measured times are not finite", hint="measure again with eaglequant accept")
    return Timing(bandwidth, target_overhead, draft_overhead, context, what)


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
