"""The decode speed-up a draft gives its target at concurrency C, predicted:
acceptance(k) x t_step / (t_verify(k) + t_draft(k)), each a forward at batch C.

- ``t_step``: one decode step of the target alone at C sequences, a forward over C tokens.
- ``t_verify(k)``: the target's forward over the C (k + 1) tokens a round verifies. It reads the same dense weights
  as a step, but a MoE layer reads every expert one of those tokens is routed to
  (:meth:`~.target_step.TargetWeights.distinct_experts`, with the routing locality of a sequence's consecutive
  tokens), and each sequence's cache.
- ``t_draft(k)``: the draft's k steps at C sequences, the weight bytes a round reads (:mod:`eaglequant.readback.cost`)
  on the draft's own ranks.

Each forward costs the larger of its bytes over the bandwidth and its GEMMs at the accelerator's peak
(:mod:`.roofline`), plus a fixed overhead (launches, synchronisation, all-reduces); a target forward also a cost
each sequence it runs, a share of it each token (``Timing.sequence_overhead_s``, ``token_overhead_s``: kernels far
from the peak at few tokens an expert, attention's compute, sampling, the engine's bookkeeping), fitted to the
target alone at several concurrencies (:func:`calibrate_target_steps`); a round a fixed overhead of its own (the
rejection sampler, the proposer's bookkeeping), counted in ``t_verify``. Acceptance is a per-token property and the
same at every C. A predicted speed-up is at most its acceptance length (a verification costs at least a
step) and carries an interval: the acceptance interval where one is given, widened by the model's stated error
(:data:`MODEL_ERROR`). The free terms are stated (:func:`stated_timing`, printed beside every figure) or calibrated
on what an engine measured (:func:`calibrate`), which prints its residuals and refuses terms that cannot be costs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.draft.capture_routing import RoutingLocality
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.hardware import ACCELERATORS, DEFAULT_ACCELERATOR, Accelerator
from eaglequant.speedup.roofline import draft_compute_seconds, target_compute_seconds
from eaglequant.speedup.target_step import TargetWeights, expected_experts_text

# The stated defaults, printed with every figure: each forward a fixed 0.1 ms (scheduling, sampling) and 25 us a
# decoder layer (kernel launches, the all-reduces of tensor parallelism), each round 0.1 ms (the rejection sampler,
# the proposer's bookkeeping); the bandwidth and peaks are the accelerator's (an H100 SXM unless named).
BANDWIDTH = ACCELERATORS[DEFAULT_ACCELERATOR].bandwidth
FORWARD_OVERHEAD_S = 1e-4
LAYER_OVERHEAD_S = 2.5e-5
ROUND_OVERHEAD_S = 1e-4
# How alike a sequence's consecutive tokens route (rho, :meth:`~.target_step.TargetWeights.distinct_experts`):
# halfway between independent routing (0, the most experts a verification can read: the bound) and a sequence's
# tokens sharing their experts (1). No public figure for a fine-grained MoE's token-to-token routing was found, so
# it is an assumption, printed as such (--routing-locality sets it).
ROUTING_LOCALITY = 0.5
# The model's relative error, beside the acceptance interval in a prediction's: the calibration benchmark's largest
# error away from its calibration point, 11.6% (docs/speedup-checks.md), rounded up.
MODEL_ERROR = 0.15
# A fitted overhead past this is not an overhead: the record timed something else (another device, a queue).
MAX_OVERHEAD_S = 1.0


@dataclass(frozen=True)
class Residual(JsonRecord):
    """A calibration's fit at one measured point: the speed-up measured, and what the fitted terms predict."""

    json_values = named(measured=rounded(4), predicted=rounded(4))
    json_computed = ("error",)

    draft_tokens: int
    concurrency: int
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """Predicted over measured, less 1 (+0.05: 5% high)."""
        return round(self.predicted / self.measured - 1.0, 4) if self.measured else math.nan


@dataclass(frozen=True)
class StepResidual(JsonRecord):
    """The target-alone fit at one concurrency: the seconds a step measured, and what the fitted terms predict."""

    json_values = named(measured_s=rounded(7), predicted_s=rounded(7))
    json_computed = ("error",)

    concurrency: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Predicted over measured, less 1 (+0.05: 5% high)."""
        return round(self.predicted_s / self.measured_s - 1.0, 4) if self.measured_s else math.nan


@dataclass(frozen=True)
class Timing(JsonRecord):
    """The model's free terms: what a byte, an operation and a forward cost, and how alike tokens route."""

    bandwidth: float  # bytes a second one rank reads weights at
    target_overhead_s: float  # each target forward, beyond its bytes
    draft_overhead_s: float  # each draft step, beyond its bytes
    round_overhead_s: float = 0.0  # each speculative round, beyond its forwards
    context: int = 2048  # tokens of context whose cache a forward reads, each sequence
    calibrated_on: str | None = None  # what the overheads were fitted to (None: stated)
    routing_locality: float = ROUTING_LOCALITY
    hardware: Accelerator = ACCELERATORS[DEFAULT_ACCELERATOR]  # its peaks price the GEMMs
    measured_draft_tokens: tuple[int, ...] = ()  # the k the fit measured (none: stated terms)
    residuals: tuple[Residual, ...] = ()  # the fit at each measured point
    token_overhead_s: float = 0.0  # each token a target forward runs, beyond its roofline (0: not counted)
    sequence_overhead_s: float = 0.0  # each sequence a target forward runs, however many of its tokens
    step_residuals: tuple[StepResidual, ...] = ()  # the target-alone fit at each concurrency (none: not fitted so)
    token_share_per_percent: float = 0.0  # how far a fitted token share moves for each 1% its round is off (0: stated)
    routing_measured: RoutingLocality | None = None  # the routing locality measured by capture (None: stated or fit)

    @property
    def measured_range(self) -> tuple[int, int] | None:
        """The smallest and largest k the terms were fitted at (None: stated)."""
        ks = self.measured_draft_tokens
        return (min(ks), max(ks)) if ks else None

    def extrapolated(self, draft_tokens: int) -> bool:
        """Whether ``draft_tokens`` lies outside the k the terms were fitted at."""
        found = self.measured_range
        return found is not None and not found[0] <= draft_tokens <= found[1]

    def assumptions(self) -> list[str]:
        """The terms in words, for printing beside the figures."""
        fitted = (
            f" (fitted to {self.calibrated_on})"
            if self.calibrated_on
            else f" (stated: a forward {FORWARD_OVERHEAD_S * 1e3:g} ms and {LAYER_OVERHEAD_S * 1e6:g} us a layer, a "
            f"round {ROUND_OVERHEAD_S * 1e3:g} ms; --measured fits them)"
        )
        return [
            f"weights and cache read at {self.bandwidth / 1e12:.3g} TB/s a rank; {self.hardware.describe()}",
            f"a fixed {self.target_overhead_s * 1e3:.3g} ms each target forward, {self.draft_overhead_s * 1e3:.3g} ms "
            f"each draft step and {self.round_overhead_s * 1e3:.3g} ms each round beyond their bytes{fitted}",
            self._token_text(),
            *(f"target alone at C = {r.concurrency}: measured {r.measured_s * 1e3:.4g} ms a step, predicted "
              f"{r.predicted_s * 1e3:.4g} ms ({r.error:+.1%})" for r in self.step_residuals),
            f"each sequence at {self.context} tokens of context",
            f"{self._locality_text()}: a sequence's next token routes as its last did with that chance, else "
            "independently and uniformly (0: the bound, every token independent)",
            *(f"fit at k = {r.draft_tokens}, C = {r.concurrency}: measured {r.measured:.3f}x, predicted "
              f"{r.predicted:.3f}x ({r.error:+.1%})" for r in self.residuals),
        ]  # fmt: skip

    def _locality_text(self) -> str:
        measured = self.routing_measured
        if measured is None:
            return f"routing locality {self.routing_locality:g}"
        return f"{measured.text()}, the speed-up's interval priced at both its ends"

    def _token_text(self) -> str:
        if not (self.token_overhead_s or self.sequence_overhead_s):
            return (
                "a target forward's cost a sequence and a token beyond its roofline: not counted (0; fitted from the "
                "target alone at two concurrencies or more, calibrate_target_steps)"
            )
        loads = ", ".join(str(r.concurrency) for r in self.step_residuals)
        source = f" (fitted with the forward's fixed cost to the target alone at C = {loads})" if loads else ""
        return (
            f"{(self.token_overhead_s + self.sequence_overhead_s) * 1e6:.3g} us each sequence a target step runs "
            f"beyond its roofline{source}: {self.token_overhead_s * 1e6:.3g} us of it each token (a verification "
            f"pays it k + 1 times a sequence), {self.sequence_overhead_s * 1e6:.3g} us each sequence (once); the "
            f"draft's steps pay neither{self._share_text()}"
        )

    def _share_text(self) -> str:
        if not self.token_share_per_percent:
            return ""
        share = self.token_overhead_s / (self.token_overhead_s + self.sequence_overhead_s)
        return (
            f"; the token share {share:.3g} moves by {self.token_share_per_percent:.2g} for each 1% the round it was "
            "fitted to is off (fitted at a larger C, a round pays it more and fixes it better)"
        )


def stated_timing(
    target: TargetWeights,
    draft_layers: int = 1,
    context: int = 2048,
    *,
    hardware: Accelerator | None = None,
    routing_locality: float = ROUTING_LOCALITY,
) -> Timing:
    """The stated terms for ``target`` and a draft of ``draft_layers`` decoder layers (EAGLE-3 heads have one), on
    ``hardware`` (an H100 SXM unless given)."""
    hardware = hardware or ACCELERATORS[DEFAULT_ACCELERATOR]
    if not 0.0 <= routing_locality <= 1.0:
        raise InputError(f"routing locality {routing_locality:g}: must be from 0 to 1", hint="e.g. 0.5")
    return Timing(
        hardware.bandwidth,
        FORWARD_OVERHEAD_S + target.layers * LAYER_OVERHEAD_S,
        FORWARD_OVERHEAD_S + draft_layers * LAYER_OVERHEAD_S,
        ROUND_OVERHEAD_S,
        context,
        routing_locality=routing_locality,
        hardware=hardware,
    )


MODEL_ASSUMPTIONS = (
    "a forward costs the larger of its bytes' time and its GEMMs' at the peak for the kind they run in, plus its "
    "overheads",
    "acceptance is a per-token property: the same at every concurrency",
    "attention's compute is not counted (its cache's bytes are)",
)


@dataclass(frozen=True)
class SpeedupPoint(JsonRecord):
    """The predicted speed-up at one k, with the times it is made of and its interval (``low``, ``high``)."""

    json_values = named(
        acceptance_length=rounded(4), step_s=rounded(7), verify_s=rounded(7), draft_s=rounded(7), speedup=rounded(4),
        low=rounded(4), high=rounded(4),
    )  # fmt: skip

    draft_tokens: int
    acceptance_length: float
    step_s: float
    verify_s: float
    draft_s: float
    speedup: float
    low: float
    high: float


@dataclass(frozen=True)
class SpeedupTable(JsonRecord):
    """One draft on one target at one concurrency: the predicted speed-up at each k, and everything it assumed."""

    json_computed = ("best_draft_tokens", "assumptions")

    draft: str
    target: TargetWeights
    timing: Timing
    points: tuple[SpeedupPoint, ...]
    acceptance_from: str  # where acceptance(k) came from, in words
    concurrency: int = 1
    draft_tensor_parallel_size: int | None = None  # None: the target's
    draft_kv_bytes_per_position: float = 0.0  # the draft's own cache a context position (0: not counted)

    @property
    def best(self) -> SpeedupPoint:
        """The k with the highest predicted speed-up (the smaller k on a tie)."""
        return max(self.points, key=lambda p: (p.speedup, -p.draft_tokens))

    @property
    def best_draft_tokens(self) -> int:
        return self.best.draft_tokens

    @property
    def assumptions(self) -> list[str]:
        c, rho = self.concurrency, self.timing.routing_locality
        verify = [
            f"at C = {c}, a k = {p.draft_tokens} verification reads "
            f"{expected_experts_text(self.target, p.draft_tokens + 1, c, rho)} experts a MoE layer "
            f"(a step {expected_experts_text(self.target, 1, c, rho)})"
            for p in self.points[:1] + self.points[-1:]
        ]
        moe = [*verify, _parallelism(self.target)] if self.target.moe_layers else []
        draft_tp = self.draft_tensor_parallel_size or self.target.tensor_parallel_size
        extrapolated = [
            f"k = {p.draft_tokens} lies outside the measured k = {_range_text(self.timing.measured_range)}: "
            "extrapolated"
            for p in self.points
            if self.timing.extrapolated(p.draft_tokens)
        ]
        return [
            *self.timing.assumptions(),
            *MODEL_ASSUMPTIONS,
            f"{c} sequences decoding at once (concurrency C = {c}); the target on {self.target.tensor_parallel_size} "
            f"ranks, the draft on {draft_tp}",
            f"the draft's own cache: {self.draft_kv_bytes_per_position:,.0f} bytes a context position"
            if self.draft_kv_bytes_per_position
            else "the draft's own cache is not counted",
            *moe,
            f"acceptance: {self.acceptance_from}",
            f"each speed-up's interval: the acceptance interval where given, widened by the model's stated error "
            f"(+/-{MODEL_ERROR:.0%}), and at most the acceptance length",
            *extrapolated,
        ]

    def at(self, draft_tokens: int) -> SpeedupPoint | None:
        return next((p for p in self.points if p.draft_tokens == draft_tokens), None)


def _range_text(found: tuple[int, int] | None) -> str:
    return "" if found is None else f"{found[0]}..{found[1]}" if found[0] != found[1] else str(found[0])


def _parallelism(target: TargetWeights) -> str:
    if target.expert_parallel_size > 1:
        return (
            f"expert parallelism: whole experts on {target.expert_parallel_size} ranks, the busiest rank's share read"
        )
    return "tensor parallelism shards every weight (experts too) across ranks"


def step_seconds(target: TargetWeights, timing: Timing, tokens: int = 1, sequences: int = 1) -> float:
    """A target forward over ``tokens`` tokens of each of ``sequences`` sequences: a roofline plus its fixed
    overhead, its cost a sequence and its cost a token."""
    read = target.forward_bytes(tokens, timing.context, sequences, timing.routing_locality) / timing.bandwidth
    computed = target_compute_seconds(target, timing.hardware, tokens * sequences)
    per_sequence = timing.sequence_overhead_s + tokens * timing.token_overhead_s
    return max(read, computed) + timing.target_overhead_s + sequences * per_sequence


def draft_seconds(
    draft: RoundCost,
    draft_tokens: int,
    timing: Timing,
    ranks: int,
    sequences: int = 1,
    kind: str = "bf16",
    kv_bytes_per_position: float = 0.0,
) -> float:
    """The draft's ``draft_tokens`` steps of one round for ``sequences`` sequences on ``ranks`` ranks: its weights
    once a step whatever the batch, an embedding row a token, its own cache (``kv_bytes_per_position`` a context
    position, split over its ranks) each sequence each step, its GEMMs at the peak for ``kind``."""
    priced = draft.at(draft_tokens)
    embedding = priced.part("embedding")
    rows = (sequences - 1) * embedding.bytes_per_round if embedding is not None else 0
    cache = draft_tokens * sequences * timing.context * kv_bytes_per_position
    read = (priced.bytes_per_round + rows + cache) / ranks / timing.bandwidth
    computed = draft_compute_seconds(priced, timing.hardware, sequences, ranks, kind)
    return max(read, computed) + draft_tokens * timing.draft_overhead_s


def predict_speedup(
    draft_name: str,
    target: TargetWeights,
    draft: RoundCost,
    acceptance: Mapping[int, float],
    timing: Timing | None = None,
    acceptance_from: str = "given",
    *,
    concurrency: int = 1,
    acceptance_interval: Mapping[int, tuple[float, float]] | None = None,
    draft_tensor_parallel_size: int | None = None,
    draft_compute: str = "bf16",
    draft_kv_bytes_per_position: float = 0.0,
) -> SpeedupTable:
    """The speed-up at each k ``acceptance`` gives a length for (k -> acceptance length), at ``concurrency``
    sequences; ``timing``: the stated terms unless given; ``acceptance_interval``: k -> (low, high) of the length;
    the draft on ``draft_tensor_parallel_size`` ranks (None: the target's), its quantized GEMMs in
    ``draft_compute``, its own cache ``draft_kv_bytes_per_position`` a context position (0: not counted)."""
    if not acceptance:
        raise InputError("no acceptance length to predict a speed-up from", hint="predict it: verify DST --inputs CAP")
    if concurrency < 1:
        raise InputError(f"concurrency {concurrency}: must be at least 1", hint="e.g. --concurrency 4,8,16")
    timing = timing or stated_timing(target)
    ranks = draft_tensor_parallel_size or target.tensor_parallel_size
    step = step_seconds(target, timing, 1, concurrency)
    points = []
    for k in sorted(acceptance):
        length = _checked_length(acceptance[k], k)
        verify = step_seconds(target, timing, k + 1, concurrency) + timing.round_overhead_s
        drafting = draft_seconds(draft, k, timing, ranks, concurrency, draft_compute, draft_kv_bytes_per_position)
        per_token = step / (verify + drafting)  # the speed-up a token of acceptance buys: at most 1
        assert per_token <= 1.0 + 1e-12, "a verification costs at least a step"
        least, most = (step / (step_seconds(target, t, k + 1, concurrency) + t.round_overhead_s + drafting)
                       for t in _locality_bounds(timing))  # fmt: skip
        low, high = (acceptance_interval or {}).get(k, (length, length))
        low, high = _checked_length(low, k), _checked_length(high, k)
        interval = (low * least * (1 - MODEL_ERROR), min(high, high * most * (1 + MODEL_ERROR)))
        points.append(SpeedupPoint(k, length, step, verify, drafting, min(length, length * per_token), *interval))
    return SpeedupTable(draft_name, target, timing, tuple(points), acceptance_from, concurrency,
                        draft_tensor_parallel_size, draft_kv_bytes_per_position)  # fmt: skip


def _locality_bounds(timing: Timing) -> tuple[Timing, Timing]:
    """The terms at the low and the high end of a measured routing locality's interval (fewer tokens sharing their
    experts: a dearer verification), or ``timing`` twice where the locality is stated or fitted."""
    measured = timing.routing_measured
    if measured is None:
        return timing, timing
    return replace(timing, routing_locality=measured.low), replace(timing, routing_locality=measured.high)


def _checked_length(length: float, draft_tokens: int) -> float:
    """An acceptance length at k: from 1 (the target's own token) to k + 1 (every drafted token accepted)."""
    if not 1.0 <= length <= draft_tokens + 1:
        raise InputError(
            f"acceptance length {length:g} at k = {draft_tokens}: must be from 1 to {draft_tokens + 1}",
            hint="a round emits the target's token and the drafted tokens it accepts",
        )
    return length


class MeasuredRound(Protocol):
    """What an engine measured at one k (``eaglequant accept``): the acceptance length, and the decode seconds a
    token with the target alone (NaN: not measured, as on one server) and with the draft."""

    @property
    def draft_tokens(self) -> int: ...
    @property
    def acceptance_length(self) -> float: ...
    @property
    def alone_seconds_per_token(self) -> float: ...
    @property
    def drafted_seconds_per_token(self) -> float: ...


def calibrate(
    target: TargetWeights,
    draft: RoundCost,
    measured: Sequence[MeasuredRound],
    stated: Timing,
    what: str,
    *,
    concurrency: int = 1,
    draft_tensor_parallel_size: int | None = None,
    draft_kv_bytes_per_position: float = 0.0,
) -> Timing:
    """``stated`` with its overheads fitted to ``measured`` at ``concurrency``. The target's comes from its decode
    alone (a step is one forward, its cost a token as ``stated`` gives it; where the target alone was not measured,
    or ``stated``'s were fitted to the target alone at several concurrencies, it stays as ``stated``). What a round
    costs beyond its verification's forward and its draft's roofline is a fixed cost a round plus one a draft step:
    measured at two k or more, both are fitted in least squares; at one k they keep the proportion ``stated`` gives
    them and their scale is fitted. A fitted term that is negative, zero where a cost must be positive, or past
    :data:`MAX_OVERHEAD_S` is refused (one line, naming it). The bandwidth, peaks and routing locality stay as
    stated. The fitted terms carry the measured k and the residuals at each."""
    if not measured:
        raise InputError(f"{what}: no draft measured at any k to calibrate on", hint="measure with eaglequant accept")
    ranks = draft_tensor_parallel_size or target.tensor_parallel_size
    bare = replace(stated, target_overhead_s=0.0, draft_overhead_s=0.0, round_overhead_s=0.0)
    alone = [m.alone_seconds_per_token for m in measured if math.isfinite(m.alone_seconds_per_token)]
    target_overhead = stated.target_overhead_s
    if alone and not stated.step_residuals:
        target_overhead = sum(alone) / len(alone) - step_seconds(target, bare, 1, concurrency)
        _check_term(what, "each target forward", target_overhead, positive=True)
    bare = replace(bare, target_overhead_s=target_overhead)
    rounds = []  # (k, seconds a round beyond its verification's forward and its draft's roofline)
    for m in measured:
        k = m.draft_tokens
        spent = m.acceptance_length * m.drafted_seconds_per_token
        drafting = draft_seconds(draft, k, bare, ranks, concurrency, "bf16", draft_kv_bytes_per_position)
        forwards = step_seconds(target, bare, k + 1, concurrency) + drafting
        rounds.append((k, spent - forwards))
    if not all(math.isfinite(rest) for _, rest in rounds):
        raise InputError(f"{what}: the measured times are not finite", hint="measure again with eaglequant accept")
    per_round, per_step = _fixed_and_per_step(what, rounds, stated.round_overhead_s, stated.draft_overhead_s)
    fitted = replace(
        bare, draft_overhead_s=per_step, round_overhead_s=per_round, calibrated_on=what,
        measured_draft_tokens=tuple(sorted({m.draft_tokens for m in measured})),
    )  # fmt: skip
    found = _residuals(target, draft, measured, fitted, concurrency, ranks, draft_kv_bytes_per_position)
    return replace(fitted, residuals=found)


def calibrate_target_steps(
    target: TargetWeights, stated: Timing, steps: Mapping[int, float], what: str, token_share: float = 1.0
) -> Timing:
    """``stated`` with the target forward's fixed overhead and its cost a sequence fitted to the target alone:
    ``steps`` maps a concurrency C to the seconds a decode step took at C sequences (C / the tokens a second of all
    sequences; a serving table's no-speculation column). In least squares over
    ``t_step(C) = roofline(C) + fixed + C * per_sequence``, at two concurrencies or more; a term that cannot be a cost
    (negative, a fixed one of zero, past :data:`MAX_OVERHEAD_S`) is refused, naming it. Nothing a draft measured
    enters it. A step runs one token a sequence, so it cannot tell a cost a token from one a sequence:
    ``token_share`` of it is taken as a token's (a verification pays it k + 1 times), the rest as a sequence's
    (:func:`calibrate_token_share` fits the share to one drafted measurement). The fitted terms carry the residual
    at each C (``step_residuals``)."""
    if not 0.0 <= token_share <= 1.0:
        raise InputError(f"token share {token_share:g}: must be from 0 to 1", hint="e.g. 1: every token pays it")
    loads = sorted(steps)
    if len(loads) < 2:
        raise InputError(
            f"{what}: the target's cost a sequence needs its decode alone at two concurrencies or more, not "
            f"{len(loads)}",
            hint="measure the target alone at several loads (e.g. C = 1, 8, 32)",
        )
    for c in loads:
        if c < 1 or not (math.isfinite(steps[c]) and steps[c] > 0):
            raise InputError(f"{what}: C = {c}, {steps[c]:g} s a step: a load is at least 1 and a step takes time",
                             hint="give seconds a decode step at each concurrency")  # fmt: skip
    bare = replace(stated, target_overhead_s=0.0, token_overhead_s=0.0, sequence_overhead_s=0.0)
    rests = [steps[c] - step_seconds(target, bare, 1, c) for c in loads]  # beyond each step's roofline
    mean_c, mean_rest = sum(loads) / len(loads), sum(rests) / len(rests)
    spread = sum((c - mean_c) ** 2 for c in loads)
    per_sequence = sum((c - mean_c) * (r - mean_rest) for c, r in zip(loads, rests, strict=True)) / spread
    fixed = mean_rest - per_sequence * mean_c
    _check_term(what, "each target forward", fixed, positive=True)
    _check_term(what, "each sequence a target step runs", per_sequence, positive=False)
    fitted = replace(stated, target_overhead_s=fixed, token_overhead_s=token_share * per_sequence,
                     sequence_overhead_s=(1.0 - token_share) * per_sequence)  # fmt: skip
    found = tuple(StepResidual(c, steps[c], step_seconds(target, fitted, 1, c)) for c in loads)
    return replace(fitted, step_residuals=found)


def calibrate_token_share(
    target: TargetWeights,
    draft: RoundCost,
    measured: Sequence[MeasuredRound],
    stated: Timing,
    what: str,
    *,
    concurrency: int = 1,
    draft_tensor_parallel_size: int | None = None,
    draft_kv_bytes_per_position: float = 0.0,
) -> Timing:
    """``stated`` (its target terms fitted to the target alone, :func:`calibrate_target_steps`) with the share of a
    step's cost a sequence that is a cost a token fitted to the drafted rounds ``measured`` at ``concurrency``, in
    least squares, the round's and the draft step's overheads as ``stated``. A verification of k + 1 tokens a
    sequence pays that share k + 1 times; a share outside 0..1 cannot be one, and is refused, naming it. What it
    assumes says how well the fit point fixes the share: how far it moves for each 1% the measured round is off (a
    round pays C·k times the share's unit, so a larger C fixes it better)."""
    per_sequence = stated.token_overhead_s + stated.sequence_overhead_s
    if not measured or not stated.step_residuals or per_sequence <= 0:
        raise InputError(f"{what}: the token share needs a drafted round and the target alone fitted at several C",
                         hint="fit the target first: calibrate_target_steps")  # fmt: skip
    ranks = draft_tensor_parallel_size or target.tensor_parallel_size
    shared = replace(stated, token_overhead_s=0.0, sequence_overhead_s=per_sequence)  # the share at 0
    slopes, rests = [], []  # a round's cost for each unit of share, and what the measured round leaves at share 0
    for m in measured:
        k = m.draft_tokens
        drafting = draft_seconds(draft, k, shared, ranks, concurrency, "bf16", draft_kv_bytes_per_position)
        at_zero = step_seconds(target, shared, k + 1, concurrency) + shared.round_overhead_s + drafting
        slopes.append(concurrency * k * per_sequence)
        rests.append(m.acceptance_length * m.drafted_seconds_per_token - at_zero)
    share = sum(a * r for a, r in zip(slopes, rests, strict=True)) / sum(a * a for a in slopes)
    rounds = [m.acceptance_length * m.drafted_seconds_per_token for m in measured]
    per_percent = 0.01 * sum(a * r for a, r in zip(slopes, rounds, strict=True)) / sum(a * a for a in slopes)
    if not 0.0 <= share <= 1.0:
        raise InputError(
            f"{what}: the fit gives {share:.3g} as the share of a target step's cost a sequence that each token pays, "
            "which cannot be one (it must be from 0 to 1)",
            hint="the rounds cost less than their forwards (0) or more than a cost a token explains (1): fit the "
            "round's overheads instead (calibrate)",
        )
    fitted = replace(stated, token_overhead_s=share * per_sequence, sequence_overhead_s=(1 - share) * per_sequence,
                     calibrated_on=f"{what}: only the share each token pays; the round's and the draft step's stated",
                     token_share_per_percent=per_percent,
                     measured_draft_tokens=tuple(sorted({m.draft_tokens for m in measured})))  # fmt: skip
    found = _residuals(target, draft, measured, fitted, concurrency, ranks, draft_kv_bytes_per_position)
    return replace(fitted, residuals=found)


def calibrate_locality(
    target: TargetWeights,
    draft: RoundCost,
    measured: Sequence[MeasuredRound],
    stated: Timing,
    what: str,
    *,
    concurrency: int = 1,
    draft_tensor_parallel_size: int | None = None,
    draft_kv_bytes_per_position: float = 0.0,
) -> Timing:
    """:func:`calibrate` with the routing locality fitted too: the rho in 0, 0.05, ..., 1 whose fitted terms leave
    the smallest squared residuals. Three k or more are needed (a round's two terms and rho); a MoE target only."""
    ks = {m.draft_tokens for m in measured}
    if not target.moe_layers or len(ks) < 3:
        raise InputError(
            f"{what}: fitting the routing locality needs a MoE target measured at three k or more, not {len(ks)}",
            hint="measure more k (accept --draft-tokens 1,2,3,4) or state it: --routing-locality 0.5",
        )
    fits = []
    for step in range(21):
        rho = step / 20
        try:
            at = replace(stated, routing_locality=rho)
            fitted = calibrate(target, draft, measured, at, what, concurrency=concurrency,
                               draft_tensor_parallel_size=draft_tensor_parallel_size,
                               draft_kv_bytes_per_position=draft_kv_bytes_per_position)  # fmt: skip
        except InputError:
            continue  # terms that cannot be costs at this rho
        fits.append((sum(r.error**2 for r in fitted.residuals), rho, fitted))
    if not fits:
        raise InputError(f"{what}: no routing locality from 0 to 1 gives terms that can be costs",
                         hint="the record is from another device, target or engine than the one priced")  # fmt: skip
    _, rho, fitted = min(fits, key=lambda fit: fit[:2])
    return replace(fitted, calibrated_on=f"{what}, routing locality {rho:g} fitted")


def _residuals(
    target: TargetWeights,
    draft: RoundCost,
    measured: Sequence[MeasuredRound],
    fitted: Timing,
    concurrency: int,
    ranks: int,
    kv_bytes_per_position: float,
) -> tuple[Residual, ...]:
    """The fitted terms' speed-up at each measured point against the one measured (the target alone's time, where
    measured, over the drafted one; else the fitted step's)."""
    found = []
    for m in measured:
        lengths = {m.draft_tokens: m.acceptance_length}
        table = predict_speedup("fit", target, draft, lengths, fitted, concurrency=concurrency,
                                draft_tensor_parallel_size=ranks,
                                draft_kv_bytes_per_position=kv_bytes_per_position)  # fmt: skip
        point = table.points[0]
        alone = m.alone_seconds_per_token if math.isfinite(m.alone_seconds_per_token) else point.step_s
        found.append(Residual(m.draft_tokens, concurrency, alone / m.drafted_seconds_per_token, point.speedup))
    return tuple(found)


def _check_term(what: str, term: str, value: float, *, positive: bool) -> None:
    """Refuse a fitted term that cannot be a cost: negative, zero where it must be positive, or past the limit."""
    bad = value < 0 or (positive and value == 0) or value > MAX_OVERHEAD_S
    if bad:
        bound = "above 0" if positive else "at least 0"
        raise InputError(
            f"{what}: the fit gives {value * 1e3:.4g} ms {term}, which cannot be a cost (it must be {bound} and at "
            f"most {MAX_OVERHEAD_S:g} s)",
            hint="the record is from another device, target or engine than the one priced, or too noisy: measure "
            "again (accept --draft-tokens 1,2,3, repeated) on the device priced",
        )


def _fixed_and_per_step(
    what: str, rounds: list[tuple[int, float]], stated_fixed: float, stated_step: float
) -> tuple[float, float]:
    """``rest = fixed + k * per_step`` fitted to the rounds in least squares; at one k, the two in the stated
    proportion, scaled to fit. A negative or out-of-range term is refused."""
    ks = [k for k, _ in rounds]
    mean_k, mean_rest = sum(ks) / len(ks), sum(rest for _, rest in rounds) / len(rounds)
    spread = sum((k - mean_k) ** 2 for k in ks)
    if spread == 0:
        _check_term(what, "each round beyond its forwards", mean_rest, positive=True)
        scale = mean_rest / (stated_fixed + mean_k * stated_step)
        return scale * stated_fixed, scale * stated_step
    per_step = sum((k - mean_k) * (rest - mean_rest) for k, rest in rounds) / spread
    fixed = mean_rest - per_step * mean_k
    _check_term(what, "each draft step", per_step, positive=False)
    _check_term(what, "each round", fixed, positive=False)
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
