"""The verification a destination records (``eaglequant_verify.json``), read as a typed record, and the verdict
it reaches, with the exit code each verdict ends ``eaglequant verify`` with.

``verify`` writes the file (:func:`eaglequant.verification.verify.write_verify_report`); the card, ``upload``
and ``batch`` read it only through :func:`read_verification` / :meth:`VerificationRecord.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE, EXIT_NOT_VERIFIED, InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, read_json_file
from eaglequant.common.text_enum import TextEnum
from eaglequant.schemes.model import VerifyThresholds

VERIFY_NAME = "eaglequant_verify.json"
_REPAIR = "run `eaglequant verify` on it again"


class Verdict(TextEnum):
    """What ``verify`` concluded; the value is how reports and JSON spell it."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_VERIFIED = "not verified numerically"  # the checks that ran hold, but parity and fidelity did not run
    INCONCLUSIVE = "inconclusive"  # every check holds, but the predicted acceptance's interval straddles the budget

    @property
    def exit_code(self) -> int:
        """How ``eaglequant verify`` ends with this verdict."""
        return _EXIT_CODES[self]


_EXIT_CODES = {
    Verdict.PASSED: 0,
    Verdict.FAILED: EXIT_CHECK_FAILED,
    Verdict.NOT_VERIFIED: EXIT_NOT_VERIFIED,
    Verdict.INCONCLUSIVE: EXIT_INCONCLUSIVE,
}


class VerificationRecordError(InputError):
    """A destination's ``eaglequant_verify.json`` cannot be read as a verification."""


@dataclass(frozen=True)
class ParityRecord:
    """One quantized linear through the fused kernel against the source GEMM."""

    module: str
    backend: str
    sqnr_db: float
    cosine: float


@dataclass(frozen=True)
class FidelityRecord:
    """The whole draft head, source against quantized weights."""

    tokens: int
    inputs: str
    top1_agreement: float | None
    mean_kl: float | None
    mean_tv: float | None
    hidden_cosine: float


@dataclass(frozen=True)
class VerificationRecord:
    ok: bool
    verdict: Verdict
    problems: tuple[Finding, ...]
    thresholds: VerifyThresholds
    parity_rows: int
    layers: tuple[ParityRecord, ...]
    fidelity: FidelityRecord | None
    notes: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        """The record says parity and fidelity ran and passed."""
        return self.ok and self.verdict is Verdict.PASSED and bool(self.layers)

    @classmethod
    def from_json(cls, data: Any, where: str = VERIFY_NAME) -> VerificationRecord:
        """``data``: the file's parsed JSON (or ``VerifyReport.to_json()``); ``where``: the file, named in errors.
        Records written before a field existed read with its default (``verdict``: passed, ``fidelity``: none)."""
        top = JsonObject(data, where, VerificationRecordError, _REPAIR)
        fidelity = top.data.get("fidelity")
        return cls(
            ok=top.boolean("ok"),
            verdict=_verdict(top),
            problems=top.findings("problems"),
            thresholds=_thresholds(top.child("thresholds")),
            parity_rows=top.integer("parity_rows"),
            layers=tuple(_parity(row) for row in top.children("layers")),
            fidelity=None if not fidelity else _fidelity(top.child("fidelity")),
            notes=top.findings("notes"),
        )


def read_verification(dst: Path) -> VerificationRecord | None:
    """The verification stored in ``dst``; None when there is none. One that cannot be read raises
    :class:`VerificationRecordError`."""
    path = dst / VERIFY_NAME
    data = read_json_file(path, VerificationRecordError, _REPAIR)
    return None if data is None else VerificationRecord.from_json(data, str(path))


def _verdict(top: JsonObject) -> Verdict:
    text = top.text("verdict") if "verdict" in top.data else Verdict.PASSED.value
    try:
        return Verdict(text)
    except ValueError:
        raise top.wrong("verdict", f"one of {', '.join(repr(v.value) for v in Verdict)}") from None


def _thresholds(row: JsonObject) -> VerifyThresholds:
    names = [f.name for f in fields(VerifyThresholds)]
    return VerifyThresholds(**{name: row.number(name) for name in names if name in row.data})


def _parity(row: JsonObject) -> ParityRecord:
    sqnr = row.get("sqnr_db")  # not finite (an exact kernel: inf) is written as text
    sqnr_db = float(sqnr) if isinstance(sqnr, str) and sqnr in ("inf", "-inf", "nan") else row.number("sqnr_db")
    return ParityRecord(row.text("module"), row.text("backend"), sqnr_db, row.number("cosine"))


def _fidelity(row: JsonObject) -> FidelityRecord:
    def optional(name: str) -> float | None:
        return None if row.data.get(name) is None else row.number(name)

    return FidelityRecord(
        tokens=row.integer("tokens"),
        inputs=row.text("inputs") if "inputs" in row.data else "synthetic",
        top1_agreement=optional("top1_agreement"),
        mean_kl=optional("mean_kl"),
        mean_tv=optional("mean_tv"),
        hidden_cosine=row.number("hidden_cosine"),
    )
