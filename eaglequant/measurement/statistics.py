"""Acceptance figures from the engine's per-prompt counters, with confidence intervals.

A draft proposes k tokens per verification step; the engine counts the drafts, and per position j how many
drafts had their first j tokens accepted (acceptance stops at the first rejection). The acceptance length
is ``1 + accepted / drafts``: tokens emitted per target forward, the figure model cards quote.

Drafts within one generation are not independent, so the intervals treat prompts as clusters: the ratio's
variance is estimated from each prompt's residual ``accepted_i - R * drafts_i`` (the linearised ratio
estimator), with Student's t on (prompts - 1) degrees of freedom. Two drafts run on the same prompts are
compared by the paired version of the same estimator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.common.text_enum import TextEnum

_Z = 1.959963984540054  # two-sided 95% normal quantile


def t_quantile(df: int) -> float:
    """Two-sided 95% Student-t quantile: the table below df 8, then the Cornish-Fisher expansion in 1/df to the
    third order (within 0.1% of the exact value from df 8 on)."""
    if df <= 0:
        return math.inf
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365}
    if df in table:
        return table[df]
    z = _Z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's spec-decode counters (the engine's), and the tokens it generated."""

    drafts: int
    accepted: int
    accepted_per_position: tuple[int, ...]
    token_ids: tuple[int, ...]
    top2_gaps: tuple[float | None, ...] = ()  # greedy: how far each chosen token led the runner-up (nats)
    # the decode phase's tokens (those after the prefill's first) and seconds, by the run's clock; None where
    # not timed (records written before decode throughput was measured)
    decode_tokens: int | None = None
    decode_seconds: float | None = None

    @staticmethod
    def from_json(record: dict[str, Any]) -> PromptCounts:
        tokens, seconds = record.get("decode_tokens"), record.get("decode_seconds")
        return PromptCounts(
            int(record.get("drafts", 0)),
            int(record.get("accepted", 0)),
            tuple(int(v) for v in record.get("accepted_per_position", ())),
            tuple(int(v) for v in record["token_ids"]),
            tuple(None if v is None else float(v) for v in record.get("top2_gaps", ())),
            None if tokens is None else int(tokens),
            None if seconds is None else float(seconds),
        )

    @property
    def timed(self) -> bool:
        """Whether the prompt's decode was timed, over at least one token and a positive time."""
        return bool(self.decode_tokens and self.decode_seconds and self.decode_seconds > 0)


def _reported(figure: float) -> float | None:
    return round(figure, 5) if math.isfinite(figure) else None


def _read_figure(written: Any, key: str) -> float:
    """A figure :func:`_reported` wrote, read back: null is no value (NaN), or, beside a value, an unknown bound
    (one prompt has no spread: -inf below, inf above)."""
    if written.get(key) is not None:
        return float(written.number(key))
    if key == "value" or written.data.get("value") is None:
        return math.nan
    return -math.inf if key == "low" else math.inf


@dataclass(frozen=True)
class Interval(JsonRecord):
    """A figure and its 95% interval; written with bounds that are not finite (one prompt has no spread to
    estimate) as null, which JSON can hold, and each to 5 decimals. Records hold it :meth:`reported`, so that it
    reads back as it was held."""

    json_values = named(value=_reported, low=_reported, high=_reported)
    json_read = named(value=_read_figure, low=_read_figure, high=_read_figure)

    value: float
    low: float
    high: float

    def reported(self) -> Interval:
        """The interval as it is written: each finite figure to 5 decimals (those that are not, kept)."""

        def rounded(figure: float) -> float:
            return round(figure, 5) if math.isfinite(figure) else figure

        return Interval(rounded(self.value), rounded(self.low), rounded(self.high))

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def reported_value(self) -> float | None:
        """The value as reports give it (:meth:`to_json`): to 5 decimals, None when not finite."""
        return _reported(self.value)

    def text(self, signed: bool = False) -> str:
        """The interval as reports give it, for reading: ``2.481 [2.395, 2.566]`` (bounds left out when not
        finite)."""
        return format_interval(self.reported_value, _reported(self.low), _reported(self.high), signed)

    def value_text(self, decimals: int = 2) -> str:
        """The value alone (``n/a`` when there is none: no draft was made)."""
        value = self.reported_value
        return "n/a" if value is None else f"{value:.{decimals}f}"


def _clustered(estimate: float, residuals: Sequence[float], divisor: float = 1.0) -> Interval:
    """``estimate`` with its 95% interval over prompts as clusters: the linearised estimator's residuals, one a
    prompt (over ``divisor``), and Student's t on prompts - 1 degrees of freedom; unbounded for one prompt."""
    m = len(residuals)
    if m < 2:
        return Interval(estimate, -math.inf, math.inf)
    se = math.sqrt(m / (m - 1) * sum(e * e for e in residuals)) / divisor
    half = t_quantile(m - 1) * se
    return Interval(estimate, estimate - half, estimate + half)


def _ratio(numerators: Sequence[float], denominators: Sequence[float], offset: float = 0.0) -> Interval:
    total_n, total_d = sum(numerators), sum(denominators)
    if total_d == 0:
        return Interval(math.nan, math.nan, math.nan)
    r = total_n / total_d
    residuals = [a - r * n for a, n in zip(numerators, denominators, strict=True)]
    return _clustered(r + offset, residuals, total_d)


def format_interval(value: float | None, low: float | None, high: float | None, signed: bool = False) -> str:
    """``2.481 [2.395, 2.566]``; bounds left out when unknown, ``n/a`` without a value."""
    form = "+.3f" if signed else ".3f"
    if value is None:
        return "n/a"
    bounds = "" if low is None or high is None else f" [{low:{form}}, {high:{form}}]"
    return f"{value:{form}}{bounds}"


@dataclass(frozen=True)
class AcceptanceFigures(JsonRecord):
    """One draft's acceptance as records hold it (:meth:`Acceptance.figures`): over how many prompts, its drafts and
    accepted tokens, and its acceptance length and per-position shares, each :meth:`Interval.reported`."""

    prompts: int
    drafts: int
    accepted: int
    acceptance_length: Interval
    per_position: tuple[Interval, ...]

    @property
    def k(self) -> int:
        return len(self.per_position)


@dataclass(frozen=True)
class Acceptance:
    """One draft in one decoding mode, over the prompts; what records hold of it is its :meth:`figures`."""

    prompts: tuple[PromptCounts, ...]

    @property
    def drafts(self) -> int:
        return sum(p.drafts for p in self.prompts)

    @property
    def accepted(self) -> int:
        return sum(p.accepted for p in self.prompts)

    @property
    def draft_tokens(self) -> int:
        return self.drafts * self.k

    @property
    def k(self) -> int:
        return max((len(p.accepted_per_position) for p in self.prompts), default=0)

    def length(self) -> Interval:
        """Acceptance length: 1 + accepted tokens per draft, its interval clipped to what a length can be, 1 to
        k + 1 (a draft of k tokens emits at least the target's own token and at most k more)."""
        length = _ratio([p.accepted for p in self.prompts], [p.drafts for p in self.prompts], offset=1.0)
        return clipped(length, 1.0, 1.0 + self.k) if self.k else length

    def per_position(self) -> list[Interval]:
        """Per position j: the share of drafts whose first j tokens were accepted, its interval on the logit scale
        (a share lies in [0, 1])."""
        return [
            share_interval(_ratio([p.accepted_per_position[j] for p in self.prompts], [p.drafts for p in self.prompts]))
            for j in range(self.k)
        ]

    def figures(self) -> AcceptanceFigures:
        """What records hold of it: the counts and the figures as written."""
        shares = tuple(share.reported() for share in self.per_position())
        return AcceptanceFigures(len(self.prompts), self.drafts, self.accepted, self.length().reported(), shares)


def clipped(interval: Interval, low: float, high: float) -> Interval:
    """``interval``'s finite bounds kept within [low, high], where the figure can lie (an unknown bound stays
    unknown)."""

    def within(bound: float) -> float:
        return min(max(bound, low), high) if math.isfinite(bound) else bound

    return Interval(interval.value, within(interval.low), within(interval.high))


def share_interval(linear: Interval) -> Interval:
    """A share's interval taken to the logit scale (the delta method: the standard error over ``p(1 - p)``) and
    back, so it stays within [0, 1] and is not symmetric near either end; a share of exactly 0 or 1, or bounds not
    known, keep the linear interval clipped to [0, 1]."""
    p, half = linear.value, linear.half_width
    if not (0 < p < 1 and math.isfinite(half)):
        return clipped(linear, 0.0, 1.0)
    centre, spread = math.log(p / (1 - p)), half / (p * (1 - p))
    return Interval(p, _expit(centre - spread), _expit(centre + spread))


def _expit(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def paired_difference(quantized: Acceptance, source: Acceptance) -> Interval:
    """Acceptance length of ``quantized`` minus ``source``'s, on the same prompts, with its interval."""
    q_n, s_n = quantized.drafts, source.drafts
    if not q_n or not s_n or len(quantized.prompts) != len(source.prompts):
        return Interval(math.nan, math.nan, math.nan)
    r_q = quantized.accepted / q_n
    r_s = source.accepted / s_n
    residuals = [
        (q.accepted - r_q * q.drafts) / q_n - (s.accepted - r_s * s.drafts) / s_n
        for q, s in zip(quantized.prompts, source.prompts, strict=True)
    ]
    k = max(quantized.k, source.k)
    return clipped(_clustered(r_q - r_s, residuals), -float(k), float(k)) if k else _clustered(r_q - r_s, residuals)


def decode_rate(prompts: Sequence[PromptCounts]) -> float | None:
    """Decode tokens per second over ``prompts``: their decode tokens over their decode seconds, totals over
    prompts (the ratio of sums, which weighs each prompt by its time); None unless every prompt was timed."""
    if not prompts or not all(p.timed for p in prompts):
        return None
    tokens, seconds = _totals(prompts)
    return tokens / seconds


def speedup(drafted: Sequence[PromptCounts], alone: Sequence[PromptCounts]) -> Interval:
    """The drafted run's decode tokens per second over the target alone's, paired by prompt, with its 95% interval.

    On the log scale the ratio of the two runs' rates is ``ln(N_d / T_d) - ln(N_a / T_a)`` (totals over prompts);
    linearised, prompt i's influence is ``n_di/N_d - t_di/T_d - n_ai/N_a + t_ai/T_a`` (the four shares sum to zero
    over prompts), so the prompts are the clusters as for acceptance, with Student's t on prompts - 1 degrees of
    freedom; the interval is taken back through exp, so it is not symmetric. NaN where either run was not timed
    on every prompt or the runs ran different prompts."""
    drafted_rate, alone_rate = decode_rate(drafted), decode_rate(alone)
    if drafted_rate is None or alone_rate is None or len(drafted) != len(alone):
        return Interval(math.nan, math.nan, math.nan)
    n_d, t_d = _totals(drafted)
    n_a, t_a = _totals(alone)
    influences = [
        (d.decode_tokens or 0) / n_d - (d.decode_seconds or 0.0) / t_d - (a.decode_tokens or 0) / n_a
        + (a.decode_seconds or 0.0) / t_a
        for d, a in zip(drafted, alone, strict=True)
    ]  # fmt: skip
    log_scale = _clustered(math.log(drafted_rate / alone_rate), influences)
    return Interval(math.exp(log_scale.value), _exp_bound(log_scale.low), _exp_bound(log_scale.high))


def _exp_bound(bound: float) -> float:
    """A bound on the log scale taken back: an unknown one (one prompt has no spread) stays unknown."""
    return math.exp(bound) if math.isfinite(bound) else bound


def _totals(prompts: Sequence[PromptCounts]) -> tuple[int, float]:
    return sum(p.decode_tokens or 0 for p in prompts), sum(p.decode_seconds or 0.0 for p in prompts)


def within_budget(difference: Interval, budget: float) -> bool:
    """The pass of the one gate (:func:`budget_verdict`): the change (DST minus source, negative a loss) is within a
    budget (a drop in tokens, positive) when its 95% interval's lower bound is at least ``-budget``: the drop's 95%
    upper bound is within the budget. A bound that is not known (one prompt has no spread) is not within."""
    return budget_verdict(difference, budget).outcome is Outcome.WITHIN


class Outcome(TextEnum):
    """A change in acceptance against a budget: its whole interval within, wholly past, or straddling it."""

    WITHIN = "within"
    PAST = "past"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class BudgetVerdict:
    """The one gate's answer for a change (:func:`budget_verdict`); ``more_prompts``: where it is inconclusive, the
    prompts more that would settle it at the variance observed (None: no spread was observed, or the estimate sits
    on the budget, so no count of prompts would)."""

    difference: Interval
    budget: float
    outcome: Outcome
    more_prompts: int | None = None
    prompts: int = 0  # the paired prompts judged (0: not said)

    @property
    def within(self) -> bool:
        return self.outcome is Outcome.WITHIN

    @property
    def past(self) -> bool:
        return self.outcome is Outcome.PAST

    @property
    def inconclusive(self) -> bool:
        return self.outcome is Outcome.INCONCLUSIVE

    def text(self) -> str:
        """The change, its interval and what decided: ``-0.028 [-0.061, +0.005]: bound -0.061, a drop of 0.061
        past the 0.05 budget``; ``... inconclusive: ... 31 more prompts would settle it at this variance``."""
        shown = self.difference.text(signed=True)
        low, high, budget = _reported(self.difference.low), _reported(self.difference.high), self.budget
        if self.within:
            return f"{shown}: {bound_text(low, budget, True)}"
        if self.past:
            if high is None:
                return f"{shown}: no estimate (no drafts), past the {budget:g} budget"
            drop = f"a drop of at least {-high:.3f}"
            return f"{shown}: upper bound {high:+.3f}, {drop}, the whole interval past the {budget:g} budget"
        return f"{shown}: inconclusive, {self._straddle_text(low)}"

    def _straddle_text(self, low: float | None) -> str:
        budget = self.budget
        if low is None:
            return f"one prompt has no spread to judge the {budget:g} budget by: more prompts would tell"
        side = "within" if self.difference.value >= -budget else "past"
        if self.more_prompts is not None:
            settle = f"{self.more_prompts} more prompts would settle it at this variance"
        elif self.prompts >= 2:
            settle = "the estimate is on the budget: no count of prompts would settle it"
        else:
            settle = "more prompts would tell"
        return f"the interval straddles the {budget:g} budget (bound {low:+.3f}, estimate {side} it); {settle}"


def budget_verdict(difference: Interval, budget: float, prompts: int = 0) -> BudgetVerdict:
    """The one gate every command judges a change in acceptance by (``verify --inputs``, ``convert --verify``,
    ``search``, ``accept``), over ``prompts`` paired prompts (the interval's clusters). The change (DST minus source,
    negative a loss) is *within* a budget (a drop, positive) when its 95% interval's lower bound is at least
    ``-budget``, *past* it when the whole interval is below ``-budget``, and otherwise *inconclusive*: the interval
    straddles the budget, and more prompts would tell (:func:`prompts_to_settle`). No estimate (no drafts) is past;
    an interval with no bounds (one prompt has no spread) is inconclusive."""
    value, low, high = difference.value, difference.low, difference.high
    if math.isnan(value) or math.isnan(low) or math.isnan(high):
        return BudgetVerdict(difference, budget, Outcome.PAST)
    if math.isfinite(low) and low >= -budget:
        return BudgetVerdict(difference, budget, Outcome.WITHIN)
    if math.isfinite(high) and high < -budget:
        return BudgetVerdict(difference, budget, Outcome.PAST)
    more = prompts_to_settle(difference, budget, prompts)
    return BudgetVerdict(difference, budget, Outcome.INCONCLUSIVE, more, prompts)


_MOST_PROMPTS = 10**9  # past this, a count is no advice


def prompts_to_settle(difference: Interval, budget: float, prompts: int) -> int | None:
    """How many prompts more than ``prompts`` would narrow the interval enough to settle it at the variance
    observed: the least n whose half-width t(n - 1) * se * sqrt((m - 1) / (n - 1)) fits between the estimate and the
    budget, se being the standard error over the m = ``prompts`` prompts (the half-width over t(m - 1)), which the
    clustered estimator makes shrink as 1 / sqrt(n - 1). None without spread (unbounded, or m < 2), or where the
    estimate is on the budget."""
    half, distance = difference.half_width, abs(difference.value + budget)
    if prompts < 2 or not math.isfinite(half) or distance == 0:
        return None
    spread = half / t_quantile(prompts - 1) * math.sqrt(prompts - 1)  # se * sqrt(m - 1): the same at every n
    n = max(prompts + 1, math.ceil((_Z * spread / distance) ** 2) + 1)  # the normal's count: t only adds to it
    while n < _MOST_PROMPTS and t_quantile(n - 1) * spread / math.sqrt(n - 1) > distance:
        n += 1
    return None if n >= _MOST_PROMPTS else n - prompts


def change_text(difference: Interval) -> str:
    """A change in acceptance length in words, one sign convention (DST minus source, negative a loss):
    ``-0.011 tokens (a loss)``, ``+0.011 tokens (a gain)``."""
    value = difference.reported_value
    if value is None:
        return "n/a"
    return f"{value:+.3f} tokens" + (" (a loss)" if value < 0 else " (a gain)" if value > 0 else " (no change)")


def gate_text(difference: Interval, budget: float) -> str:
    """The change, its interval, and the bound that decided against the budget (a drop, positive):
    ``-0.028 [-0.061, +0.005]: bound -0.061, a drop of 0.061 past the 0.05 budget``."""
    decided = bound_text(_reported(difference.low), budget, within_budget(difference, budget))
    return f"{difference.text(signed=True)}: {decided}"


def bound_text(low: float | None, budget: float, within: bool) -> str:
    """What decided: the change's lower bound as a drop against the budget (``bound -0.061, a drop of 0.061 past
    the 0.05 budget``; ``bound +0.010, no drop, within the 0.05 budget``)."""
    verdict = f"{'within' if within else 'past'} the {budget:g} budget"
    if low is None:
        return f"no bound (one prompt has no spread), {verdict}"
    if low >= 0:
        return f"bound {low:+.3f}, no drop, {verdict}"
    return f"bound {low:+.3f}, a drop of {-low:.3f} {verdict}"


# How close two tokens' log-probabilities may be for the serving dtype's arithmetic to order them either way: a
# verification pass scores k + 1 positions at once, the target alone one, and their sums round differently
# (bf16 logits near 10 are 1/16 apart). Measured on the bundled pair in bf16: both divergences from the target
# alone, in 24 prompts, were at gaps of 0 and 1/16.
NEAR_TIE_NATS = {"bfloat16": 0.125, "float16": 0.03, "float32": 0.001}


@dataclass(frozen=True)
class Lossless(JsonRecord):
    """Greedy output with a draft against the target's alone, prompt by prompt."""

    json_computed = ("ok",)
    json_first = ("equal", "near_ties", "prompts", "ok")
    json_renamed = named(tolerance="near_tie_nats")

    equal: int
    near_ties: int  # prompts that first differ where the target's top two were within the dtype's reach
    prompts: int
    first_difference: tuple[int, int] | None  # (prompt, token) of the first difference that is no near-tie
    tolerance: float = 0.0

    @property
    def ok(self) -> bool:
        return self.equal + self.near_ties == self.prompts


def lossless(drafted: Sequence[PromptCounts], alone: Sequence[PromptCounts], tolerance: float = 0.0) -> Lossless:
    """Greedy output is the target's alone, or first departs from it at a near-tie of the target's own choice
    (its top two within ``tolerance`` nats, in the run alone or in the verification pass)."""
    equal, ties, first = 0, 0, None
    for index, (a, b) in enumerate(zip(drafted, alone, strict=True)):
        if a.token_ids == b.token_ids:
            equal += 1
            continue
        position = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=False)) if x != y), None)
        at = min(len(a.token_ids), len(b.token_ids)) if position is None else position
        gaps = [gap for g in (a.top2_gaps, b.top2_gaps) if at < len(g) and (gap := g[at]) is not None]
        if position is not None and gaps and min(gaps) <= tolerance:
            ties += 1
        elif first is None:
            first = (index, at)
    return Lossless(equal, ties, len(alone), first, tolerance)
