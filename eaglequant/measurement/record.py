"""What ``accept`` records in a destination (``eaglequant_accept.json``), read as a typed record: what the model
card shows of it. ``accept`` writes the file from :class:`~eaglequant.measurement.measure.AcceptanceReport`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, read_json_file
from eaglequant.measurement.statistics import format_interval

if TYPE_CHECKING:
    from eaglequant.measurement.measure import AcceptanceReport

ACCEPT_NAME = "eaglequant_accept.json"
_REPAIR = "run `eaglequant accept` on it again"


class AcceptanceRecordError(InputError):
    """A destination's ``eaglequant_accept.json`` cannot be read as an acceptance measurement."""


@dataclass(frozen=True)
class IntervalRecord:
    value: float | None
    low: float | None
    high: float | None

    def text(self, signed: bool = False) -> str:
        return format_interval(self.value, self.low, self.high, signed)


@dataclass(frozen=True)
class ModeRecord:
    """One draft in one decoding mode: its acceptance length, per-position rates, and the difference to the
    source draft's (None for the source itself)."""

    acceptance_length: IntervalRecord
    per_position: tuple[IntervalRecord, ...]
    difference: IntervalRecord | None


@dataclass(frozen=True)
class LosslessRecord:
    equal: int
    near_ties: int
    prompts: int
    near_tie_nats: float


@dataclass(frozen=True)
class AtDraftTokensRecord:
    """One draft at one k: its greedy acceptance length, decode tokens per second (None: not timed) and the clock
    that timed it, its speed-up over the target alone (None where refused, ``speed_problems`` saying why), and its
    change against the source draft at that k (None
    for the source)."""

    draft_tokens: int
    acceptance_length: IntervalRecord
    decode_tokens_per_second: float | None
    clock: str | None
    speedup: IntervalRecord | None  # None where a physical limit or the target alone's drift refused it
    difference: IntervalRecord | None
    lossless: LosslessRecord
    speed_problems: tuple[str, ...] = ()  # the codes that refused the speed-up


@dataclass(frozen=True)
class AloneRecord:
    """The target alone's decode throughput, and the clock that timed it."""

    decode_tokens_per_second: float | None
    clock: str | None


@dataclass(frozen=True)
class DraftRecord:
    served_as: str  # "source", "stored" or "dequantized"
    modes: dict[str, ModeRecord]
    lossless: LosslessRecord
    label: str = ""
    by_draft_tokens: tuple[AtDraftTokensRecord, ...] = ()  # every k measured, the primary first (older: none)


@dataclass(frozen=True)
class AcceptanceRecord:
    engine: str
    version: str
    target: str
    draft_tokens: int
    prompts: int
    prompts_from: str
    max_tokens: int
    source: DraftRecord
    quantized: tuple[DraftRecord, ...]
    notes: tuple[Finding, ...]
    problems: tuple[Finding, ...]
    target_alone: AloneRecord | None = None  # records before decode throughput was measured have none
    device: str | None = None  # "cpu": the engine's CPU build measured

    @classmethod
    def from_json(cls, data: Any, where: str = ACCEPT_NAME) -> AcceptanceRecord:
        top = JsonObject(data, where, AcceptanceRecordError, _REPAIR)
        settings = top.child("settings")
        return cls(
            engine=top.text("engine"),
            version=top.text("version"),
            target=settings.text("target"),
            # records before the one name for k wrote it by vLLM's name
            draft_tokens=settings.integer(
                "draft_tokens" if "draft_tokens" in settings.data else "num_speculative_tokens"
            ),
            prompts=settings.integer("prompts"),
            prompts_from=settings.text("prompts_from"),
            max_tokens=settings.integer("max_tokens"),
            source=_draft(top.child("source")),
            quantized=tuple(_draft(row) for row in top.children("quantized")),
            notes=top.findings("notes"),
            problems=top.findings("problems"),
            target_alone=None if top.data.get("target_alone") is None else _alone(top.child("target_alone")),
            device=_optional_text(top, "device"),
        )


def read_acceptance(dst: Path) -> AcceptanceRecord | None:
    """The measurement ``accept`` recorded in ``dst``; None when there is none."""
    path = dst / ACCEPT_NAME
    data = read_json_file(path, AcceptanceRecordError, _REPAIR)
    return None if data is None else AcceptanceRecord.from_json(data, str(path))


def _interval(row: JsonObject) -> IntervalRecord:
    def bound(name: str) -> float | None:
        return None if row.data.get(name) is None else row.number(name)

    return IntervalRecord(bound("value"), bound("low"), bound("high"))


def _mode(row: JsonObject) -> ModeRecord:
    difference = None if row.data.get("difference") is None else _interval(row.child("difference"))
    return ModeRecord(
        _interval(row.child("acceptance_length")), tuple(_interval(p) for p in row.children("per_position")), difference
    )


def _lossless(lossless: JsonObject) -> LosslessRecord:
    return LosslessRecord(
        lossless.integer("equal"),
        lossless.integer("near_ties") if "near_ties" in lossless.data else 0,
        lossless.integer("prompts"),
        lossless.number("near_tie_nats") if "near_tie_nats" in lossless.data else 0.0,
    )


def _optional_number(row: JsonObject, key: str) -> float | None:
    return None if row.data.get(key) is None else row.number(key)


def _optional_text(row: JsonObject, key: str) -> str | None:
    return None if row.data.get(key) is None else row.text(key)


def _alone(row: JsonObject) -> AloneRecord:
    return AloneRecord(_optional_number(row, "decode_tokens_per_second"), _optional_text(row, "clock"))


def _at_draft_tokens(row: JsonObject) -> AtDraftTokensRecord:
    difference = None if row.data.get("difference") is None else _interval(row.child("difference"))
    return AtDraftTokensRecord(
        draft_tokens=row.integer("draft_tokens"),
        acceptance_length=_interval(row.child("acceptance_length")),
        decode_tokens_per_second=_optional_number(row, "decode_tokens_per_second"),
        clock=_optional_text(row, "clock"),
        speedup=None if row.data.get("speedup") is None else _interval(row.child("speedup")),
        difference=difference,
        lossless=_lossless(row.child("lossless")),
        speed_problems=tuple(str(code) for code in row.data.get("speed_problems", ())),
    )


def _draft(row: JsonObject) -> DraftRecord:
    served_as = row.text("served_as")
    return DraftRecord(
        served_as=served_as,
        modes={name: _mode(mode) for name, mode in row.child_map("modes").items()},
        lossless=_lossless(row.child("lossless")),
        label=row.text("label") if "label" in row.data else served_as,
        by_draft_tokens=tuple(_at_draft_tokens(at) for at in row.children("by_draft_tokens"))
        if "by_draft_tokens" in row.data
        else (),
    )


def write_acceptance(dst: Path, report: AcceptanceReport, label: str) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference); its card, which shows it, is
    the caller's to refresh (:func:`eaglequant.publish.card.refresh_card`)."""
    # the record: the report narrowed to this draft (its ok and problems are then the source's and this draft's)
    recorded = replace(report, quantized=[d for d in report.quantized if d.label == label])
    path = dst / ACCEPT_NAME
    write_text_whole(path, json.dumps(recorded.to_json(), indent=2) + "\n")
    return path
