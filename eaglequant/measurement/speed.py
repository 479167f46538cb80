"""Measured speed-ups read back typed: what ``accept`` measured of each draft at each k, in the terms a cost model
calibrates from (seconds per output token with and without the draft, and the acceptance length that explains
the difference).

``accept --json`` and ``eaglequant_accept.json`` hold the same shape: the target alone's decode tokens per second
(``target_alone``), and per draft ``by_draft_tokens``, one entry per k measured with its acceptance length, decode
tokens per second and speed-up over the target alone with its interval. :func:`measured_speeds` reads either.

With ``accept --concurrency``, the same at each C: ``target_alone.by_concurrency`` (the target alone's output tokens
per second over a pass with at most C requests in flight) and each k's ``by_concurrency`` (the draft's).
:func:`alone_steps_by_concurrency` reads the former as the seconds a decode step took at each load, and
``measured_speeds(..., concurrency=C)`` the latter as rounds at C, in the same per-sequence terms: a pass's output
rate R with C sequences decoding at once is C / R seconds a token of one sequence. A pass has C in flight only
while C prompts are left, so a C past the record's prompts is left out, and the prompts are best a multiple of each
C (the last requests of a pass otherwise decode fewer at once: the figure is then C's and a little less's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError
from eaglequant.measurement.limits import TARGET_DRIFT
from eaglequant.measurement.record import ACCEPT_NAME, AcceptanceRecord, IntervalRecord
from eaglequant.measurement.statistics import Interval


@dataclass(frozen=True)
class MeasuredSpeed:
    """One draft at one k, as the engine ran it: ``label`` is the draft's (``source`` for the source draft, else
    the DST's path), ``acceptance_length`` the greedy one, the seconds per output token of the decode phase
    alone and with the draft, and the speed-up (alone over drafted seconds per token) with its 95% interval over
    prompts."""

    label: str
    draft_tokens: int
    acceptance_length: float
    alone_seconds_per_token: float
    drafted_seconds_per_token: float
    speedup: Interval


def measured_speeds(
    record_json: dict[str, Any], where: str = ACCEPT_NAME, concurrency: int | None = None
) -> list[MeasuredSpeed]:
    """Every draft at every k that ``record_json`` (``accept --json``'s output or an ``eaglequant_accept.json``)
    holds timed: the source draft first, then each quantized draft, each k in the order measured. A record written
    before decode throughput was measured, an entry whose run was not timed, or one whose speed-up a physical limit
    or the target alone's drift refused (:mod:`~eaglequant.measurement.limits`), gives none; ``where`` names the file
    in an error. ``concurrency`` C: the passes at C instead (``accept --concurrency``), their seconds a token of one
    sequence, the pass's acceptance length."""
    record = AcceptanceRecord.from_json(record_json, where)
    if concurrency is not None:
        return _speeds_at(record, concurrency)
    alone = record.target_alone
    if alone is None or not alone.decode_tokens_per_second:
        return []
    found = []
    for draft in (record.source, *record.quantized):
        for at in draft.by_draft_tokens:
            length = at.acceptance_length.value
            if not at.decode_tokens_per_second or length is None or at.speedup is None or at.speedup.value is None:
                continue
            found.append(
                MeasuredSpeed(
                    draft.label,
                    at.draft_tokens,
                    length,
                    1 / alone.decode_tokens_per_second,
                    1 / at.decode_tokens_per_second,
                    _interval(at.speedup),
                )
            )
    return found


def _interval(recorded: IntervalRecord) -> Interval:
    """An interval as written (bounds that were not finite written as null) back as an :class:`Interval`."""
    value = math.nan if recorded.value is None else recorded.value
    low = -math.inf if recorded.low is None else recorded.low
    high = math.inf if recorded.high is None else recorded.high
    return Interval(value, low, high)


def alone_steps_by_concurrency(record_json: dict[str, Any], where: str = ACCEPT_NAME) -> dict[int, float]:
    """C -> the seconds a decode step of the target alone took at C (C over the pass's output tokens per second,
    over its runs together), at each C the record holds a rate for, up to its prompts, whose runs held still (a C
    where they drifted past :data:`~eaglequant.measurement.limits.TARGET_DRIFT` is no result, and left out)."""
    return _alone_steps(AcceptanceRecord.from_json(record_json, where))


def _alone_steps(record: AcceptanceRecord) -> dict[int, float]:
    steps = {}
    for at in () if record.target_alone is None else record.target_alone.by_concurrency:
        rate, drift = at.output_tokens_per_second.value, at.drift
        if rate is None or not rate > 0 or (drift is not None and drift > TARGET_DRIFT):
            continue
        if at.concurrency <= record.settings.prompts:
            steps[at.concurrency] = at.concurrency / rate
    return steps


def _speeds_at(record: AcceptanceRecord, concurrency: int) -> list[MeasuredSpeed]:
    steps = _alone_steps(record)
    if concurrency not in steps:
        alone = () if record.target_alone is None else record.target_alone.by_concurrency
        measured = ", ".join(str(c) for c in sorted(at.concurrency for at in alone)) or "none"
        raise InputError(
            f"{record.settings.target}: the target alone has no steady rate at concurrency {concurrency} within its "
            f"{record.settings.prompts} prompts (measured at: {measured})",
            hint="fit at a C the record holds, or measure it: accept --concurrency 1,2,4,8",
        )
    found = []
    for draft in (record.source, *record.quantized):
        for at in draft.by_draft_tokens:
            for c in at.by_concurrency:
                rate, length = c.output_tokens_per_second.value, c.acceptance_length
                if c.concurrency != concurrency or c.speedup is None or not rate or length is None:
                    continue
                found.append(MeasuredSpeed(draft.label, at.draft_tokens, length, steps[concurrency],
                                           concurrency / rate, _interval(c.speedup)))  # fmt: skip
    return found
