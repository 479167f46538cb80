"""Sequential verdicts: a candidate is predicted sequence by sequence and stops as soon as its interval settles it.

A candidate's paired difference against the source is looked at after 2, 4, 8, ... sequences and then after all
of them (the planned looks, L in all). At an interim look the verdict is settled when the difference's interval at
the confidence 1 - 5%/L lies wholly within the budget (its lower bound at least -budget: a pass) or wholly past it
(its upper bound below -budget: a fail); otherwise the candidate goes on. By Bonferroni's inequality the chance that
any interim interval misses the true difference is at most (L - 1) x 5%/L < 5%, so an early stop is wrong with
probability under 5%. At the last look the one gate (the 95% interval,
:func:`~eaglequant.measurement.statistics.within_budget`) decides, as without looks. The wider interval is the
95% one's centre and standard error (:func:`~eaglequant.measurement.statistics.paired_difference`, prompts as
clusters, Student's t on prompts - 1 degrees of freedom) with the quantile for the smaller error rate. An
interval of no width (every sequence so far gave the same difference, often none at all, which two or four
sequences of a close draft do by chance) settles nothing: the t interval estimates no spread from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eaglequant.measurement.statistics import Interval, t_quantile
from eaglequant.record.search import SearchSequential

ERROR_RATE = 0.05  # the chance, over all looks, that a verdict stopped early is wrong


def planned_looks(sequences: int) -> tuple[int, ...]:
    """The sequence counts a candidate is looked at after: 2, 4, 8, ... below ``sequences``, then ``sequences``."""
    looks, at = [], 2
    while at < sequences:
        looks.append(at)
        at *= 2
    return (*looks, sequences)


def t_quantile_at(df: int, alpha: float) -> float:
    """Two-sided (1 - ``alpha``) Student-t quantile on ``df`` degrees of freedom, by bisection on the t
    distribution's tail (the regularised incomplete beta function)."""
    if df <= 0:
        return math.inf
    low, high = 0.0, 1.0
    while _two_sided_tail(high, df) > alpha:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if _two_sided_tail(middle, df) > alpha else (low, middle)
    return (low + high) / 2


def _two_sided_tail(t: float, df: int) -> float:
    """P(|T| > t) for Student's t on ``df`` degrees of freedom: I_x(df/2, 1/2) with x = df / (df + t^2)."""
    return _incomplete_beta(df / (df + t * t), df / 2, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Numerical Recipes' betacf)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    return front * _beta_fraction(x, a, b) / a


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b), by the modified Lentz method."""

    def bounded(value: float) -> float:
        return value if abs(value) > 1e-300 else 1e-300

    c, d = 1.0, 1.0 / bounded(1 - (a + b) * x / (a + 1))
    fraction = d
    for m in range(1, 400):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for numerator in (even, odd):
            d = 1.0 / bounded(1 + numerator * d)
            c = bounded(1 + numerator / c)
            fraction *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return fraction


def widened(difference: Interval, prompts: int, alpha: float) -> Interval:
    """``difference``'s 95% interval over ``prompts`` sequences widened to confidence 1 - ``alpha``: the same
    centre and standard error, the quantile for ``alpha``."""
    if prompts < 2 or not math.isfinite(difference.low):
        return Interval(difference.value, -math.inf, math.inf)
    half = difference.half_width * t_quantile_at(prompts - 1, alpha) / t_quantile(prompts - 1)
    return Interval(difference.value, difference.value - half, difference.value + half)


@dataclass(frozen=True)
class SequentialPlan:
    """The looks a search takes at each candidate, and what an interim look judges."""

    looks: tuple[int, ...]  # sequences predicted at each look, the last all of them
    interim_confidence: float  # of the interval an interim look judges: 1 - error_rate / len(looks)
    error_rate: float  # the chance that any verdict stopped early is wrong, at most
    text: str

    @classmethod
    def of(cls, sequences: int) -> SequentialPlan:
        looks = planned_looks(sequences)
        confidence = 1 - ERROR_RATE / len(looks)
        text = (
            f"sequential: each candidate is looked at after {', '.join(map(str, looks))} sequences; an interim look "
            f"stops it when the change's {confidence:.1%} interval (5% over {len(looks)} looks, Bonferroni) lies "
            f"wholly within or wholly past the budget, so the chance that any early stop is wrong is at most "
            f"{ERROR_RATE:.0%}; the last look is the one gate on the 95% interval"
        )
        return cls(looks, round(confidence, 6), ERROR_RATE, text)

    def record(self) -> SearchSequential:
        """The plan as the search record states it."""
        return SearchSequential(self.looks, self.interim_confidence, self.error_rate, self.text)

    def settled(self, difference: Interval, sequences: int, budget: float) -> bool | None:
        """At an interim look after ``sequences``: True (within the budget) or False (past it) where the wide
        interval settles it; None where it does not, at the last look, and between looks."""
        if sequences not in self.looks[:-1] or not difference.half_width > 0:
            return None  # no spread: every sequence so far differed alike, which a few can do by chance
        wide = widened(difference, sequences, 1 - self.interim_confidence)
        if wide.low >= -budget:
            return True
        if wide.high < -budget:
            return False
        return None
