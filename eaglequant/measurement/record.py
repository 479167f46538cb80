"""What ``accept`` records in a destination (``eaglequant_accept.json``), read as a typed record: what the model
card shows of it. ``accept`` writes the file from :class:`~eaglequant.measurement.measure.AcceptanceReport`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, JsonRecord, named, read_json_file
from eaglequant.measurement.measure import SettingsRecord
from eaglequant.measurement.statistics import format_interval

if TYPE_CHECKING:
    from eaglequant.measurement.measure import AcceptanceReport

ACCEPT_NAME = "eaglequant_accept.json"
_REPAIR = "run `eaglequant accept` on it again"


class AcceptanceRecordError(InputError):
    """A destination's ``eaglequant_accept.json`` cannot be read as an acceptance measurement."""


@dataclass(frozen=True)
class IntervalRecord(JsonRecord):
    """A figure and its 95% interval as written: null (or, in older files, nothing) where there is none."""

    value: float | None = None
    low: float | None = None
    high: float | None = None

    def text(self, signed: bool = False) -> str:
        return format_interval(self.value, self.low, self.high, signed)


@dataclass(frozen=True)
class ModeRecord(JsonRecord):
    """One draft in one decoding mode: its acceptance length, per-position rates, and the difference to the
    source draft's (None for the source itself)."""

    acceptance_length: IntervalRecord
    per_position: tuple[IntervalRecord, ...]
    difference: IntervalRecord | None = None


@dataclass(frozen=True)
class LosslessRecord(JsonRecord):
    json_first = ("equal", "near_ties", "prompts")

    equal: int
    prompts: int
    near_ties: int = 0  # records written before near-ties were told apart have none
    near_tie_nats: float = 0.0


@dataclass(frozen=True)
class AtDraftTokensRecord(JsonRecord):
    """One draft at one k: its greedy acceptance length, decode tokens per second (None: not timed) and the clock
    that timed it, its speed-up over the target alone (None where refused, ``speed_problems`` saying why), and its
    change against the source draft at that k (None for the source)."""

    draft_tokens: int
    acceptance_length: IntervalRecord
    lossless: LosslessRecord
    decode_tokens_per_second: float | None = None
    clock: str | None = None
    speedup: IntervalRecord | None = None  # None where a physical limit or the target alone's drift refused it
    difference: IntervalRecord | None = None
    speed_problems: tuple[str, ...] = ()  # the codes that refused the speed-up


@dataclass(frozen=True)
class AloneRecord(JsonRecord):
    """The target alone's decode throughput, and the clock that timed it."""

    decode_tokens_per_second: float | None = None
    clock: str | None = None


def _label(obj: JsonObject, key: str) -> str:
    """Records written before drafts had labels: the way it was served."""
    return obj.text(key) if key in obj.data else obj.text("served_as")


@dataclass(frozen=True)
class DraftRecord(JsonRecord):
    json_read = named(label=_label)

    served_as: str  # "source", "stored" or "dequantized"
    modes: dict[str, ModeRecord]
    lossless: LosslessRecord
    label: str = ""
    by_draft_tokens: tuple[AtDraftTokensRecord, ...] = ()  # every k measured, the primary first (older: none)


@dataclass(frozen=True)
class AcceptanceRecord(JsonRecord):
    """What the card and the speed-up's calibration read of the file, each entry by its declaration; files written
    before an entry existed read with its default."""

    json_error = AcceptanceRecordError
    json_hint = _REPAIR
    json_first = ("engine", "version", "settings")

    settings: SettingsRecord  # read first: a file that is no accept record is told by its want of settings
    engine: str
    version: str
    source: DraftRecord
    quantized: tuple[DraftRecord, ...]
    notes: tuple[Finding, ...]
    problems: tuple[Finding, ...]
    target_alone: AloneRecord | None = None  # records before decode throughput was measured have none
    device: str | None = None  # "cpu": the engine's CPU build measured

    @property
    def target(self) -> str:
        return self.settings.target

    @property
    def draft_tokens(self) -> int:
        return self.settings.draft_tokens

    @property
    def prompts(self) -> int:
        return self.settings.prompts

    @property
    def prompts_from(self) -> str:
        return self.settings.prompts_from

    @property
    def max_tokens(self) -> int:
        return self.settings.max_tokens


def read_acceptance(dst: Path) -> AcceptanceRecord | None:
    """The measurement ``accept`` recorded in ``dst``; None when there is none."""
    path = dst / ACCEPT_NAME
    data = read_json_file(path, AcceptanceRecordError, _REPAIR)
    return None if data is None else AcceptanceRecord.from_json(data, str(path))


def write_acceptance(dst: Path, report: AcceptanceReport, label: str) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference); its card, which shows it, is
    the caller's to refresh (:func:`eaglequant.publish.card.refresh_card`)."""
    # the record: the report narrowed to this draft (its ok and problems are then the source's and this draft's)
    recorded = replace(report, quantized=[d for d in report.quantized if d.label == label])
    path = dst / ACCEPT_NAME
    write_text_whole(path, json.dumps(recorded.to_json(), indent=2) + "\n")
    return path
