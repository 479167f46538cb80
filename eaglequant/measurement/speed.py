"""Measured speed-ups read back typed: what ``accept`` measured of each draft at each k, in the terms a cost model
calibrates from (seconds per output token with and without the draft, and the acceptance length that explains
the difference).

``accept --json`` and ``eaglequant_accept.json`` hold the same shape: the target alone's decode tokens per second
(``target_alone``), and per draft ``by_draft_tokens``, one entry per k measured with its acceptance length, decode
tokens per second and speed-up over the target alone with its interval. :func:`measured_speeds` reads either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


def measured_speeds(record_json: dict[str, Any], where: str = ACCEPT_NAME) -> list[MeasuredSpeed]:
    """Every draft at every k that ``record_json`` (``accept --json``'s output or an ``eaglequant_accept.json``)
    holds timed: the source draft first, then each quantized draft, each k in the order measured. A record written
    before decode throughput was measured, an entry whose run was not timed, or one whose speed-up a physical limit
    or the target alone's drift refused (:mod:`~eaglequant.measurement.limits`), gives none; ``where`` names the file
    in an error."""
    record = AcceptanceRecord.from_json(record_json, where)
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
