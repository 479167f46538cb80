"""The k for every load: ``search --objective speedup --concurrency 1,2,4`` (or ``1-64``, or ``4:0.5,16:0.5``).

A draft's plan at each load (concurrency: the sequences decoded together) is the k of its highest predicted
speed-up there, or k = 0 (do not speculate) where no k's predicted speed-up beats the target alone. The decision is
on the point, not the interval's low end: the point is the model's best estimate of the throughput, and a k whose
interval reaches below 1 is still the better bet while its point is above it. The plan's speed-up is the mean over
the loads, weighted as the team asked (equal weights by default), a load that does not speculate counting 1.

Candidates are ranked by that speed-up; those whose interval overlaps the winner's are a tie within the model's
error, and the tie goes to the one that reads the fewest bytes a round (candidates come smallest first).

The ks merge into vLLM's ``num_speculative_tokens_per_batch_size``: inclusive batch-size ranges
``(start, end, k)``, the first starting at 1 (vLLM's validator requires it); each load's k holds from it up to the
next load, as vLLM itself carries a k forward through a gap, and past the last load vLLM carries the last k on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eaglequant.common.errors import InputError, given, words
from eaglequant.speedup.model import SpeedupPoint, SpeedupTable

MAX_CONCURRENCY = 1 << 16
ScheduleRange = tuple[int, int, int]  # (first batch size, last batch size, k), inclusive; k = 0: no speculation


@dataclass(frozen=True)
class Loads:
    """The concurrencies a team serves at, each with its weight (they sum to 1)."""

    concurrency: tuple[int, ...]
    weights: tuple[float, ...]

    @property
    def text(self) -> str:
        if len(self.concurrency) == 1:
            return f"concurrency {self.concurrency[0]}"
        equal = len(set(self.weights)) == 1
        each = ", ".join(
            str(c) if equal else f"{c} (weight {w:.3g})" for c, w in zip(self.concurrency, self.weights, strict=True)
        )
        return f"concurrency {each}" + (" (equal weights)" if equal else "")


def parse_loads(spec: str | int | Sequence[int] | Mapping[int, float] | None) -> Loads:
    """The loads as given: ``"1,2,4"``, ``"1-64"`` (the powers of two from 1 to 64), ``"4:0.5,16:0.5"`` (weights,
    for every load or none), an int, a list of ints or a mapping concurrency -> weight; None: concurrency 1."""
    if spec is None:
        return Loads((1,), (1.0,))
    if isinstance(spec, Mapping):
        pairs = [(int(c), float(w)) for c, w in spec.items()]
    elif isinstance(spec, int):
        pairs = [(spec, 1.0)]
    elif isinstance(spec, str):
        pairs = _parsed_pairs(spec)
    else:
        pairs = [(int(c), 1.0) for c in spec]
    return _checked(pairs, str(spec))


def _parsed_pairs(text: str) -> list[tuple[int, float]]:
    """``text``'s entries as (concurrency, weight); an entry without a weight weighs 1 (checked after)."""
    pairs: list[tuple[int, float]] = []
    weighted = []
    for entry in (part.strip() for part in text.split(",")):
        load, _, weight = entry.partition(":")
        weighted.append(bool(weight))
        try:
            value = float(weight) if weight else 1.0
            if "-" in load:
                pairs += [(c, value) for c in _powers_of_two(load, text)]
            else:
                pairs.append((int(load), value))
        except ValueError:
            raise _refused(text, f": {entry!r} is not a concurrency (or CONCURRENCY:WEIGHT)") from None
    if any(weighted) and not all(weighted):
        raise _refused(text, ": weigh every load or none")
    return pairs


def _powers_of_two(span: str, text: str) -> list[int]:
    """``"1-64"``: 1, 2, 4, ..., 64; both ends powers of two."""
    low, high = (int(end) for end in span.split("-", 1))
    if not (_power_of_two(low) and _power_of_two(high) and low <= high):
        raise _refused(text, f": {span!r} is a range of powers of two, from the smaller (e.g. 1-64)")
    return [1 << bit for bit in range(low.bit_length() - 1, high.bit_length())]


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _checked(pairs: list[tuple[int, float]], text: str) -> Loads:
    if not pairs:
        raise _refused(text, ": no load given")
    loads = [c for c, _ in pairs]
    bad = next((c for c in loads if not 1 <= c <= MAX_CONCURRENCY), None)
    if bad is not None:
        raise _refused(text, f": {bad} is not a concurrency from 1 to {MAX_CONCURRENCY}")
    if len(set(loads)) != len(loads):
        raise _refused(text, ": a load is given twice")
    if not all(w > 0 and w < float("inf") for _, w in pairs):
        raise _refused(text, ": a weight must be a positive number")
    total = sum(w for _, w in pairs)
    ordered = sorted(pairs)
    return Loads(tuple(c for c, _ in ordered), tuple(w / total for _, w in ordered))


def _refused(text: str, why: str) -> InputError:
    return InputError(
        words(given("concurrency", text), why),
        hint="e.g. --concurrency 1,2,4,8 or 1-64 (powers of two), weighted as 4:0.5,16:0.5",
    )


@dataclass(frozen=True)
class LoadChoice:
    """One load's k for one draft: the point of its highest predicted speed-up there, or None where no k beats the
    target alone (k = 0: do not speculate)."""

    concurrency: int
    weight: float
    best: SpeedupPoint  # the highest predicted, whether or not it beats the target alone

    @property
    def point(self) -> SpeedupPoint | None:
        return self.best if self.best.speedup > 1.0 else None

    @property
    def draft_tokens(self) -> int:
        return 0 if self.point is None else self.point.draft_tokens

    @property
    def speedup(self) -> float:
        return 1.0 if self.point is None else self.point.speedup

    @property
    def low(self) -> float:
        return 1.0 if self.point is None else _end(self.point.low, self.point.speedup)

    @property
    def high(self) -> float:
        return 1.0 if self.point is None else _end(self.point.high, self.point.speedup)


def _end(value: float | None, point: float) -> float:
    return point if value is None else value


@dataclass(frozen=True)
class ServingPlan:
    """A draft's k at every load, and its speed-up over them as weighted."""

    draft: str
    choices: tuple[LoadChoice, ...]

    @property
    def speedup(self) -> float:
        return sum(c.weight * c.speedup for c in self.choices)

    @property
    def low(self) -> float:
        return sum(c.weight * c.low for c in self.choices)

    @property
    def high(self) -> float:
        return sum(c.weight * c.high for c in self.choices)

    @property
    def best_speedup(self) -> float:
        """The mean of each load's highest predicted speed-up as weighted, beating the target alone or not: what
        orders plans that do not pay."""
        return sum(c.weight * c.best.speedup for c in self.choices)

    @property
    def pays(self) -> bool:
        """Speculation beats the target alone at some load."""
        return any(c.point is not None for c in self.choices)

    @property
    def served_draft_tokens(self) -> int:
        """The one k for an engine that takes one: that of the heaviest load that speculates (the lowest
        concurrency among equals); 0 where none does."""
        speculating = [c for c in self.choices if c.point is not None]
        if not speculating:
            return 0
        return max(speculating, key=lambda c: (c.weight, -c.concurrency)).draft_tokens

    @property
    def schedule(self) -> tuple[ScheduleRange, ...]:
        return schedule_ranges([(c.concurrency, c.draft_tokens) for c in self.choices])

    def interval_text(self) -> str:
        return f"{self.speedup:.3f}× [{self.low:.3f}, {self.high:.3f}]"


def serving_plan(draft: str, tables: Mapping[int, SpeedupTable], loads: Loads) -> ServingPlan:
    """``draft``'s plan from its predicted tables by concurrency (one for each of ``loads``)."""
    choices = []
    for concurrency, weight in zip(loads.concurrency, loads.weights, strict=True):
        choices.append(LoadChoice(concurrency, weight, tables[concurrency].best))
    return ServingPlan(draft, tuple(choices))


def schedule_ranges(ks: Sequence[tuple[int, int]]) -> tuple[ScheduleRange, ...]:
    """(concurrency, k) pairs as vLLM's ``num_speculative_tokens_per_batch_size``: each load's k from it (from 1,
    for the lowest) up to the next load less one, the last range ending at the last load, equal neighbours merged."""
    ordered = sorted(ks)
    ranges: list[ScheduleRange] = []
    for i, (load, k) in enumerate(ordered):
        start = 1 if i == 0 else load
        end = ordered[i + 1][0] - 1 if i + 1 < len(ordered) else load
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], end, k)
        else:
            ranges.append((start, end, k))
    return tuple(ranges)


@dataclass(frozen=True)
class Ranking:
    """The candidates' plans ranked: the pick, the highest where a tie went to fewer bytes, and the tie."""

    pick: int  # index into the plans ranked
    top: int  # the highest predicted speed-up
    tied: tuple[int, ...]  # the others whose interval overlaps the top's, fewest bytes first
    runner_up: int | None  # the best of the rest (tied or not); None: one candidate

    @property
    def tie_broken(self) -> bool:
        return self.pick != self.top


def ranked(plans: Sequence[ServingPlan]) -> Ranking:
    """The highest speed-up (then the highest predicted where loads do not speculate, then the earlier: plans come
    fewest bytes first); the plans that pay and whose interval overlaps it are tied with it, and the tie goes to the
    fewest bytes."""
    if not plans:
        raise ValueError("no plan to rank")
    top = max(range(len(plans)), key=lambda i: (plans[i].speedup, plans[i].best_speedup, -i))
    best = plans[top]
    tied = tuple(
        i for i, plan in enumerate(plans) if i != top and plan.pays and plan.high >= best.low and plan.low <= best.high
    )
    pick = min((top, *tied)) if best.pays else top
    rest = [i for i in range(len(plans)) if i != pick]
    runner = max(rest, key=lambda i: (plans[i].speedup, plans[i].best_speedup, -i)) if rest else None
    return Ranking(pick, top, tied, runner)
