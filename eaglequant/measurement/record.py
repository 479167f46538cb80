"""What ``accept`` records (``eaglequant_accept.json``, and ``accept --json``), one declaration both ways: the
file is written from :class:`AcceptanceRecord` (:meth:`~eaglequant.measurement.measure.AcceptanceReport.record`
builds it from the live report) and read back as the same record, which the model card and the speed-up's
calibration read. Each entry a file written before it existed lacks reads as its default (not recorded)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.common.atomic import write_text_whole
from eaglequant.common.draft_tokens import Schedule, schedule_text
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import NOT_WRITTEN, JsonObject, JsonRecord, named, read_json_file
from eaglequant.measurement.statistics import Interval, Outcome, format_interval

ACCEPT_NAME = "eaglequant_accept.json"
_REPAIR = "run `eaglequant accept` on it again"


class AcceptanceRecordError(InputError):
    """A destination's ``eaglequant_accept.json`` cannot be read as an acceptance measurement."""


@dataclass(frozen=True)
class Mode(JsonRecord):
    name: str
    temperature: float
    seed: int = 0


def _draft_tokens(obj: JsonObject, key: str) -> int:
    """Records before the one name for k wrote it by vLLM's name."""
    return obj.integer(key if key in obj.data else "num_speculative_tokens")


@dataclass(frozen=True)
class SettingsRecord(JsonRecord):
    """What a record holds of the :class:`~eaglequant.measurement.measure.Settings` it was measured with
    (``Settings.record``): the prompts as their count; an entry older records lack reads as its default (not
    recorded)."""

    json_read = named(draft_tokens=_draft_tokens)

    target: str
    prompts: int
    prompts_from: str
    draft_tokens: int
    max_tokens: int
    modes: tuple[Mode, ...] = ()
    dtype: str | None = None
    seed: int | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    more_draft_tokens: tuple[int, ...] = ()
    target_alone_runs: int | None = None
    concurrency: tuple[int, ...] = ()
    schedule: Schedule = ()  # vLLM's num_speculative_tokens_per_batch_size served beside the fixed k


@dataclass(frozen=True)
class IntervalRecord(JsonRecord):
    """A figure and its 95% interval as written: null (or, in older files, nothing) where there is none."""

    value: float | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, interval: Interval) -> IntervalRecord:
        """``interval`` as records hold it: each figure to 5 decimals, one that is not finite as None."""
        return cls(**interval.to_json())

    def text(self, signed: bool = False) -> str:
        return format_interval(self.value, self.low, self.high, signed)


def interval_record(interval: Interval | None) -> IntervalRecord | None:
    return None if interval is None else IntervalRecord.of(interval)


def _if_any(value: Any) -> Any:
    """A value rule: an empty value (no schedule) is not written."""
    return value if value else NOT_WRITTEN


@dataclass(frozen=True, kw_only=True)
class ModeRecord(JsonRecord):
    """One draft in one decoding mode: over how many prompts, its drafts and accepted tokens, its acceptance length
    and per-position rates, the difference to the source draft's (None for the source itself, or none to report)
    and its decode tokens per second to 4 decimals (None: not timed)."""

    prompts: int | None = None
    drafts: int | None = None
    accepted: int | None = None
    acceptance_length: IntervalRecord
    per_position: tuple[IntervalRecord, ...]
    difference: IntervalRecord | None = None
    decode_tokens_per_second: float | None = None


@dataclass(frozen=True)
class LosslessRecord(JsonRecord):
    """Greedy output with a draft against the target's alone (:class:`~.statistics.Lossless`), as written."""

    json_computed = ("ok",)
    json_first = ("equal", "near_ties", "prompts", "ok")

    equal: int
    prompts: int
    near_ties: int = 0  # records written before near-ties were told apart have none
    first_difference: tuple[int, int] | None = None  # (prompt, token) of the first that is no near-tie
    near_tie_nats: float = 0.0

    @property
    def ok(self) -> bool:
        return self.equal + self.near_ties == self.prompts


@dataclass(frozen=True, kw_only=True)
class AtConcurrencyRecord(JsonRecord):
    """One draft at one k with at most C requests in flight: its pass's output tokens per second and acceptance
    length (None: it drafted nothing), its speed-up over the target alone at that C as reported (None where refused,
    ``speed_problems`` saying why) and as measured."""

    concurrency: int
    output_tokens_per_second: IntervalRecord
    acceptance_length: float | None = None
    speedup: IntervalRecord | None = None
    measured_speedup: IntervalRecord | None = None
    speed_problems: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AtDraftTokensRecord(JsonRecord):
    """One draft at one k (or, ``scheduled``, under the schedule: it and its words written first, ``draft_tokens``
    its largest k): its greedy acceptance length, decode tokens per second (None: not timed) and the clock that
    timed it, its speed-up over the target alone as reported (None where refused, ``speed_problems`` saying why) and
    as measured, its change against the source draft at that k (None for the source), and each C's pass."""

    json_computed = ("schedule_words",)
    json_first = ("schedule_words",)
    json_renamed = named(schedule_words="schedule", schedule="num_speculative_tokens_per_batch_size")
    json_values = named(schedule_words=_if_any, schedule=_if_any)

    schedule: Schedule = ()  # vLLM's num_speculative_tokens_per_batch_size (none: one k)
    draft_tokens: int
    acceptance_length: IntervalRecord
    decode_tokens_per_second: float | None = None
    clock: str | None = None
    speedup: IntervalRecord | None = None  # None where a physical limit or the target alone's drift refused it
    measured_speedup: IntervalRecord | None = None
    speed_problems: tuple[str, ...] = ()  # the codes that refused the speed-up
    difference: IntervalRecord | None = None
    lossless: LosslessRecord
    by_concurrency: tuple[AtConcurrencyRecord, ...] = ()  # each C asked, in order

    @property
    def schedule_words(self) -> str:
        """The schedule as the command line gives it (``1:3,2-4:1``; empty: none)."""
        return schedule_text(self.schedule) if self.schedule else ""


@dataclass(frozen=True, kw_only=True)
class AloneAtRecord(JsonRecord):
    """The target alone with at most C requests in flight: its output tokens per second over its runs together,
    each run's (to 4 decimals), and how far they moved apart (None: not known)."""

    concurrency: int
    output_tokens_per_second: IntervalRecord
    runs: tuple[float | None, ...] = ()
    drift: float | None = None


@dataclass(frozen=True, kw_only=True)
class AloneRecord(JsonRecord):
    """The target alone's decode tokens per second over all its runs, the clock that timed it, each run's own rate
    (before the drafts, then after them) and how far they moved apart, and each C's (to 4 decimals)."""

    decode_tokens_per_second: float | None = None
    clock: str | None = None
    runs: tuple[float | None, ...] = ()
    drift: float | None = None
    by_concurrency: tuple[AloneAtRecord, ...] = ()


def _label(obj: JsonObject, key: str) -> str:
    """Records written before drafts had labels: the way it was served."""
    return obj.text(key) if key in obj.data else obj.text("served_as")


@dataclass(frozen=True, kw_only=True)
class DraftRecord(JsonRecord):
    """One draft (the source, or a quantized one) as it was served: what it is, its budget and the verdict on it at
    the judged k (None without a budget), its figures in each mode, at each k and under the schedule, the seconds
    its run took, and its problems."""

    json_read = named(label=_label)

    label: str = ""
    path: str | None = None
    served_as: str  # "source", "stored", "dequantized" or "server"
    dequantized: tuple[str, ...] = ()
    scheme: str | None = None
    budget: float | None = None
    served_draft_tokens: int | None = None
    judged_draft_tokens: int | None = None
    budget_verdict: Outcome | None = None
    lossless: LosslessRecord
    modes: dict[str, ModeRecord]
    by_draft_tokens: tuple[AtDraftTokensRecord, ...] = ()  # every k measured, the primary first (older: none)
    scheduled: AtDraftTokensRecord | None = None  # served with the settings' schedule (None: none asked)
    seconds: float | None = None
    problems: tuple[Finding, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AcceptanceRecord(JsonRecord):
    """What ``accept`` writes and the card and the speed-up's calibration read, each entry by its declaration;
    files written before an entry existed read with its default. ``ok``: no problem."""

    json_error = AcceptanceRecordError
    json_hint = _REPAIR
    json_computed = ("ok",)
    json_first = (
        *("engine", "version", "speculative_config", "settings", "source", "quantized", "notes", "target_alone"),
        *("device", "engine_build", "ok"),
    )

    settings: SettingsRecord  # read first: a file that is no accept record is told by its want of settings
    engine: str
    version: str
    speculative_config: dict[str, Any] | None = None
    source: DraftRecord
    quantized: tuple[DraftRecord, ...]
    notes: tuple[Finding, ...]
    target_alone: AloneRecord | None = None  # records before decode throughput was measured have none
    device: str | None = None  # "cpu": the engine's CPU build measured
    engine_build: str | None = None  # the engine release that measured, in words (``vLLM 0.32.0 CPU build``)
    problems: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def read_acceptance(dst: Path) -> AcceptanceRecord | None:
    """The measurement ``accept`` recorded in ``dst``; None when there is none."""
    path = dst / ACCEPT_NAME
    data = read_json_file(path, AcceptanceRecordError, _REPAIR)
    return None if data is None else AcceptanceRecord.from_json(data, str(path))


def write_acceptance(dst: Path, record: AcceptanceRecord) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference): ``record``, the report's for
    this draft (``AcceptanceReport.for_draft(label).record()``); its card, which shows it, is the caller's to refresh
    (:func:`eaglequant.publish.card.refresh_card`)."""
    path = dst / ACCEPT_NAME
    write_text_whole(path, json.dumps(record.to_json(), indent=2) + "\n")
    return path
