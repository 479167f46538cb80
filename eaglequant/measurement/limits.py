"""What a measurement can physically be, checked where its figures are made; a figure past a limit is a finding,
never a result.

- An acceptance length lies in [1, k + 1] (the target's own token, and at most the k drafted), a per-position rate
  in [0, 1]: counters that give otherwise are not one draft's.
- A decode speed-up lies at most at the acceptance length at its k: a round emits at most that many tokens on
  average and costs at least one target step, and drafting is not free.
- A speed-up whose 95% interval spans more than :data:`SPEEDUP_SPREAD` (high over low) says nothing.
- The target alone is served more than once, before and after the drafts; where its decode rate moved by more than
  :data:`TARGET_DRIFT` between those runs, the machine did not hold still, and no speed-up of the run is a result.
"""

from __future__ import annotations

from collections.abc import Sequence

from eaglequant.common.findings import Finding
from eaglequant.measurement.statistics import Acceptance, Interval

SPEEDUP_SPREAD = 2.0  # a speed-up's 95% interval, high over low, past which it is no result
TARGET_DRIFT = 0.15  # the target alone's decode rate, fastest run over slowest less 1, past which a run is no result
SPEED_CODES = ("speedup-past-acceptance", "speedup-unsettled", "target-alone-drifted")


def acceptance_problems(label: str, k: int, acceptance: Acceptance, at: str | None = None) -> list[Finding]:
    """``acceptance-out-of-range`` where a greedy acceptance length or a per-position rate of ``label`` at ``k``
    lies outside what a draft of k tokens can give (``at``: how it was served, in words, where not one k)."""
    found = []
    length = acceptance.length().value
    at = at or f"k = {k}"
    if acceptance.drafts and not 1.0 <= length <= 1.0 + k:
        said = f"{label} at {at}: acceptance length {length:.3f} outside 1 to {k + 1}, which no draft can give"
        found.append(Finding("acceptance-out-of-range", label, said))
    rates = [rate.value for rate in acceptance.per_position()]
    if acceptance.drafts and any(not 0.0 <= rate <= 1.0 for rate in rates):
        shown = " / ".join(f"{rate:.2f}" for rate in rates)
        said = f"{label} at {at}: per-position acceptance rates {shown} outside 0 to 1"
        found.append(Finding("acceptance-out-of-range", label, said))
    return found


def speedup_problems(label: str, k: int, length: Interval, speedup: Interval, at: str | None = None) -> list[Finding]:
    """Why ``label``'s speed-up at ``k`` (``at``: how it was served, in words, where not one k) is no result: above its
    acceptance length (``speedup-past-acceptance``), or an interval wider than :data:`SPEEDUP_SPREAD`
    (``speedup-unsettled``). None where it was not timed."""
    value = speedup.value
    if value != value:  # not timed: nothing to judge
        return []
    found = []
    at = at or f"k = {k}"
    if value > length.value:
        said = (
            f"{label} at {at}: measured speed-up {speedup.text()} is above its acceptance length "
            f"{length.value:.3f}, which no draft can reach: the runs were not timed alike (a busy machine?); "
            "no speed-up reported"
        )
        found.append(Finding("speedup-past-acceptance", label, said))
    spread = speedup.high / speedup.low if speedup.low > 0 else float("inf")
    if not spread <= SPEEDUP_SPREAD:
        said = (
            f"{label} at {at}: measured speed-up {speedup.text()} spans more than {SPEEDUP_SPREAD:g}× (high over "
            "low); no speed-up reported: measure more prompts on a machine that holds still"
        )
        found.append(Finding("speedup-unsettled", label, said))
    return found


def drift(rates: Sequence[float | None]) -> float | None:
    """How far the target alone's decode rate moved between its runs: the fastest over the slowest, less 1 (None
    with fewer than two timed runs)."""
    timed = [rate for rate in rates if rate]
    return max(timed) / min(timed) - 1 if len(timed) > 1 else None


def drift_problem(target: str, rates: Sequence[float | None], concurrency: int | None = None) -> Finding | None:
    """``target-alone-drifted`` where the target alone's rate moved past :data:`TARGET_DRIFT` between its runs: its
    decode rate one prompt at a time, or (``concurrency`` given) its output rate with at most that many in flight."""
    moved = drift(rates)
    if moved is None or moved <= TARGET_DRIFT:
        return None
    shown = ", then ".join("n/a" if rate is None else f"{rate:.1f}" for rate in rates)
    did = "decoded at" if concurrency is None else f"with at most {concurrency} requests in flight gave"
    said = (
        f"the target alone {did} {shown} tok/s in its runs before and after the drafts, {moved:.0%} apart (more "
        f"than {TARGET_DRIFT:.0%}): the machine did not hold still; no speed-up of this run is reported"
    )
    return Finding("target-alone-drifted", target, said)
