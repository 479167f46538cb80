"""The report ``convert`` writes into every destination (``eaglequant_report.json``): the record of what the
conversion did. ``verify``, ``explain``, the model card, ``upload`` and ``batch`` read it through
:class:`ConversionReport`, never as a loose dict.

Versions: :data:`REPORT_VERSION` is the one this eaglequant writes. Reports written before versioning have no
``report_version`` key and are read as version 1 (they lack only ``verification``). A report of a newer version
is refused: its fields may mean something this eaglequant does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.common.config_change import ConfigChange
from eaglequant.common.errors import CheckpointError, InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import NOT_WRITTEN, ErrorType, JsonObject, JsonRecord, R, named, read_json_file
from eaglequant.common.version import __version__
from eaglequant.engines.target import TargetModel
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention
from eaglequant.readback.cost import RoundCost

# 2 added report_version and verification; 3 the cost of a round per engine (round_costs); 4 the config.json values
# written other than the source's (config_changes) and the target's context length (target_layers.context); 5 each
# note as a finding with its code ({"code", "subject", "message"}: before, its message alone)
REPORT_VERSION = 5
_REPAIR = "it was changed after conversion or is damaged: convert the checkpoint again"


class ReportError(CheckpointError):
    """A report that cannot be read, or whose content is not what its version defines."""


class NewerReportError(InputError):
    """A report written by a newer eaglequant, in a version this one does not know."""


@dataclass(frozen=True)
class RecordedLinear(JsonRecord):
    """A quantized linear and the error of its stored weights against the source's."""

    module: str
    shape: tuple[int, ...]
    relative_error: float
    sqnr_db: float


@dataclass(frozen=True)
class DtypeTotal(JsonRecord):
    json_renamed = named(nbytes="bytes")

    count: int
    nbytes: int


@dataclass(frozen=True)
class RecordedSource(JsonRecord):
    """The checkpoint a conversion read: where, which Hub repo and commit, and the SHA-256 of every file."""

    path: str
    repo_id: str | None
    revision: str | None
    commit: str | None
    files: dict[str, str]


@dataclass(frozen=True)
class ManifestRecord(JsonRecord):
    """What an output was made from and with which options, reduced to ``key`` (:mod:`eaglequant.record.manifest`)."""

    key: str
    source: RecordedSource
    options: dict[str, Any]


@dataclass(frozen=True)
class CardContext(JsonRecord):
    """What the model card needs beyond the conversion's figures: the draft's name, its target, the licence."""

    base_model: str | None
    draft: str
    target: str | None
    license: dict[str, str]


@dataclass(frozen=True)
class VerificationSummary(JsonRecord):
    """The verdict of ``convert --verify`` (the full figures are in ``eaglequant_verify.json``)."""

    ok: bool
    verdict: str


@dataclass(frozen=True)
class ConversionReport(JsonRecord):
    """What a conversion did, as ``eaglequant_report.json`` records it: each version's keys, a missing manifest or
    card as {} (a report read is written back in its own version: a version-1 report stays version 1)."""

    json_read = named(
        manifest=lambda top, key: _or_none(ManifestRecord, top, key),
        card=lambda top, key: _or_none(CardContext, top, key),
    )
    json_values = named(
        report_version="_since_version_2",
        verification="_since_version_2",
        round_costs="_since_version_3",
        config_changes="_since_version_4",
        own_schemes="_since_version_4",
        target_layers="_target_json",
        notes="_notes_json",
        manifest=lambda manifest: {} if manifest is None else manifest,
        card=lambda card: {} if card is None else card,
        seconds=lambda seconds: NOT_WRITTEN if seconds is None else seconds,
    )

    eaglequant_version: str
    report_version: int
    destination: str
    source: str | None
    layout: str
    scheme: str
    scheme_label: str
    scheme_kinds: KindPair
    scheme_toml: str  # the scheme actually used, thresholds included: verify applies these
    attention: Attention
    format: str
    algorithm: str | None  # the format's name for the scheme
    notes: tuple[Finding, ...]
    calibrated_input_amax: dict[str, float]
    engines: tuple[str, ...]  # the engines the conversion targeted
    target_layers: TargetModel
    quantized: tuple[RecordedLinear, ...]
    kept: dict[str, str]  # tensor -> why it is not quantized
    excluded_linears: dict[str, str]
    exclude: tuple[str, ...]  # the exclusion patterns written into the config
    tensor_dtypes: dict[str, DtypeTotal]
    source_bytes: int
    output_bytes: int
    files: dict[str, str]  # every file beside the report -> SHA-256
    copied_files: tuple[str, ...]
    manifest: ManifestRecord | None
    card: CardContext | None
    verification: VerificationSummary | None  # None: not verified when written (always None in version 1)
    round_costs: tuple[RoundCost, ...] = ()  # per targeted engine (none before version 3)
    config_changes: tuple[ConfigChange, ...] = ()  # none before version 4
    own_schemes: dict[str, str] = field(default_factory=dict)  # fc / lm_head -> its own scheme's TOML (version 4)
    seconds: float | None = None  # how long the conversion took: in convert --json, never in the file (None)

    def _since_version_2(self, value: Any) -> Any:
        return value if self.report_version >= 2 else NOT_WRITTEN

    def _since_version_3(self, value: Any) -> Any:
        return value if self.report_version >= 3 else NOT_WRITTEN

    def _since_version_4(self, value: Any) -> Any:
        return value if self.report_version >= 4 else NOT_WRITTEN

    def _notes_json(self, notes: tuple[Finding, ...]) -> list[Any]:
        return [note if self.report_version >= 5 else note.message for note in notes]

    def _target_json(self, target: TargetModel) -> dict[str, Any]:
        written = target.to_json()
        return written if self.report_version >= 4 else {k: v for k, v in written.items() if k != "context"}

    def to_text(self) -> str:
        """The file's content."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(
        cls, data: Any, where: str = REPORT_NAME, error: ErrorType | None = None, hint: str = ""
    ) -> ConversionReport:
        """``data``: a report's parsed JSON; ``where``: its file, named in errors (:class:`ReportError` for a
        missing or wrong-typed key, :class:`NewerReportError` for a version newer than this eaglequant's). Read by
        the fields' declarations, the keys of the report's version only."""
        top = JsonObject(data, where, ReportError, _REPAIR)
        version = _report_version(top)
        known = _V1_KEYS + _VERSIONED_KEYS[: (version >= 2) * 2 + (version >= 3) + (version >= 4) * 2]
        top.refuse_unknown((*known, "seconds"))  # seconds: in convert --json only
        filled = {**top.data, "report_version": version} if version >= 2 else {**top.data, "report_version": 1}
        if version < 2:
            filled["verification"] = None
        if version < 4:
            target = top.child("target_layers")
            filled["target_layers"] = {k: v for k, v in target.data.items() if k != "context"}
        return super().from_json(JsonObject(filled, where, ReportError, _REPAIR))


# version 2 added two, 3 one, 4 two
_VERSIONED_KEYS = ("report_version", "verification", "round_costs", "config_changes", "own_schemes")
_V1_KEYS = (
    *("eaglequant_version", "destination", "source", "layout", "scheme", "scheme_label", "scheme_kinds"),
    *("scheme_toml", "attention", "format", "algorithm", "notes", "calibrated_input_amax", "engines"),
    *("target_layers", "quantized", "kept", "excluded_linears", "exclude", "tensor_dtypes", "source_bytes"),
    *("output_bytes", "files", "copied_files", "manifest", "card"),
)


def dtype_totals(tensors: Iterable[tuple[str, int]]) -> dict[str, DtypeTotal]:
    """dtype -> how many of ``tensors`` (dtype, bytes) have it and their bytes, by dtype."""
    totals: dict[str, DtypeTotal] = {}
    for dtype, nbytes in tensors:
        total = totals.get(dtype, DtypeTotal(0, 0))
        totals[dtype] = DtypeTotal(total.count + 1, total.nbytes + nbytes)
    return dict(sorted(totals.items()))


def read_report(dst: Path) -> ConversionReport | None:
    """The report ``convert`` wrote into ``dst``; None when there is none. One that cannot be read or is
    invalid raises :class:`ReportError`, one from a newer eaglequant :class:`NewerReportError`."""
    path = dst / REPORT_NAME
    data = read_json_file(path, ReportError, _REPAIR)
    return None if data is None else ConversionReport.from_json(data, str(path))


def report_if_readable(dst: Path) -> ConversionReport | None:
    """:func:`read_report`, with a report that cannot be read or is invalid taken as none (``batch`` neither
    reuses nor replaces such a destination); one from a newer eaglequant still raises."""
    try:
        return read_report(dst)
    except ReportError:
        return None


def _report_version(top: JsonObject) -> int:
    if "report_version" not in top.data:
        return 1
    version = top.integer("report_version")
    if version > REPORT_VERSION:
        writer = top.data.get("eaglequant_version")
        by = f"written by eaglequant {writer}, " if isinstance(writer, str) else ""
        raise NewerReportError(
            f"{top.where}: report version {version} ({by}this is eaglequant {__version__}, which reads up to "
            f"version {REPORT_VERSION})",
            hint="upgrade eaglequant (pip install -U eaglequant)",
        )
    if version < 2:
        raise top.wrong("report_version", f"2 to {REPORT_VERSION} (version 1 reports have no report_version)")
    return version


def _or_none(record: type[R], top: JsonObject, key: str) -> R | None:
    """The record under ``key``, None where it is written as {} (a conversion run without one)."""
    return record.from_json(top.child(key)) if top.get(key) != {} else None


def recorded_engines(report: ConversionReport | None) -> list[str] | None:
    """The engines a conversion targeted that this eaglequant knows (None: no report, or none recorded)."""
    from eaglequant.engines import ENGINES

    names = [name for name in report.engines if name in ENGINES] if report is not None else []
    return names or None


def recorded_source(report: ConversionReport | None) -> str | None:
    """The source a conversion was made from, as its report records it (None: no report, or none recorded):
    where ``verify``, ``upload`` and ``accept`` look when no source is given."""
    return report.source if report is not None and report.source else None
