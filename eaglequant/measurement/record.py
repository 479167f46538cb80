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
class DraftRecord:
    served_as: str  # "source", "stored" or "dequantized"
    modes: dict[str, ModeRecord]
    lossless: LosslessRecord


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


def _draft(row: JsonObject) -> DraftRecord:
    lossless = row.child("lossless")
    return DraftRecord(
        served_as=row.text("served_as"),
        modes={name: _mode(mode) for name, mode in row.child_map("modes").items()},
        lossless=LosslessRecord(
            lossless.integer("equal"),
            lossless.integer("near_ties") if "near_ties" in lossless.data else 0,
            lossless.integer("prompts"),
            lossless.number("near_tie_nats") if "near_tie_nats" in lossless.data else 0.0,
        ),
    )


def write_acceptance(dst: Path, report: AcceptanceReport, label: str) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference); its card, which shows it, is
    the caller's to refresh (:func:`eaglequant.publish.card.refresh_card`)."""
    # the record: the report narrowed to this draft (its ok and problems are then the source's and this draft's)
    recorded = replace(report, quantized=[d for d in report.quantized if d.label == label])
    path = dst / ACCEPT_NAME
    write_text_whole(path, json.dumps(recorded.to_json(), indent=2) + "\n")
    return path
