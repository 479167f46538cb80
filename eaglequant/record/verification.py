"""The verification a destination records (``eaglequant_verify.json``), read as a typed record, and the verdict
it reaches, with the exit code each verdict ends ``eaglequant verify`` with.

``verify`` writes the file (:func:`eaglequant.verification.verify.write_verify_report`); the card, ``upload``
and ``batch`` read it only through :func:`read_verification` / :meth:`VerificationRecord.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE, EXIT_NOT_VERIFIED, InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonObject, JsonRecord, finite_or_text, named, number_or_text, read_json_file
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
class ParityRecord(JsonRecord):
    """One quantized linear through the fused kernel against the source GEMM (an SQNR that is not finite, an exact
    kernel's, is written as text)."""

    json_values = named(sqnr_db=finite_or_text)
    json_read = named(sqnr_db=number_or_text)

    module: str
    backend: str
    sqnr_db: float
    cosine: float


@dataclass(frozen=True)
class FidelityRecord(JsonRecord):
    """The whole draft head, source against quantized weights."""

    json_first = ("tokens", "inputs")

    tokens: int
    top1_agreement: float | None
    mean_kl: float | None
    mean_tv: float | None
    hidden_cosine: float
    inputs: str = "synthetic"  # files written before the inputs were recorded: synthetic ones


def _fidelity(obj: JsonObject, key: str) -> FidelityRecord | None:
    """Files written without one hold null or an empty object, or (older) nothing."""
    return FidelityRecord.from_json(obj.child(key)) if obj.data.get(key) else None


@dataclass(frozen=True)
class VerificationRecord(JsonRecord):
    """What the card, ``upload`` and ``batch`` read of the file (from the file, or ``VerifyReport.to_json()``):
    each entry by its declaration; files written before an entry existed read with its default (``verdict``:
    passed)."""

    json_error = VerificationRecordError
    json_hint = _REPAIR
    json_read = named(fidelity=_fidelity)

    ok: bool
    problems: tuple[Finding, ...]
    thresholds: VerifyThresholds
    parity_rows: int
    layers: tuple[ParityRecord, ...]
    fidelity: FidelityRecord | None
    notes: tuple[Finding, ...]
    verdict: Verdict = Verdict.PASSED

    @property
    def passed(self) -> bool:
        """The record says parity and fidelity ran and passed."""
        return self.ok and self.verdict is Verdict.PASSED and bool(self.layers)


def read_verification(dst: Path) -> VerificationRecord | None:
    """The verification stored in ``dst``; None when there is none. One that cannot be read raises
    :class:`VerificationRecordError`."""
    path = dst / VERIFY_NAME
    data = read_json_file(path, VerificationRecordError, _REPAIR)
    return None if data is None else VerificationRecord.from_json(data, str(path))
