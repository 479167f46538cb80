"""The verdict a destination records of its ``convert --verify``, as ``upload`` and ``batch`` judge it: a pass
needs the report and ``eaglequant_verify.json`` (whose SHA-256 the report lists) to agree it passed."""

from __future__ import annotations

from pathlib import Path

from eaglequant.record.report import report_if_readable
from eaglequant.record.verification import (
    Verdict,
    VerificationRecord,
    VerificationRecordError,
    read_verification,
)


def recorded_verification(dst: Path) -> VerificationRecord | None:
    """The verification ``convert --verify`` stored in ``dst`` (None: none, or unreadable)."""
    try:
        return read_verification(dst)
    except VerificationRecordError:
        return None


def recorded_verdict(dst: Path) -> Verdict | None:
    """PASSED when ``dst``'s report and its verification file agree that parity and fidelity passed, INCONCLUSIVE
    when both say every check held but the predicted acceptance was not settled, FAILED when either says otherwise
    (or the file is gone), None when nothing is recorded (no report, or not verified when written). A report of
    version 1 records no verdict: the file alone decides."""
    report = report_if_readable(dst)
    if report is None or (report.report_version >= 2 and report.verification is None):
        return None
    stored = recorded_verification(dst)
    if stored is None:
        return None if report.verification is None else Verdict.FAILED
    summary = report.verification
    passed = summary is None or (summary.ok and summary.verdict == Verdict.PASSED)
    if passed and stored.passed:
        return Verdict.PASSED
    inconclusive = summary is not None and summary.verdict == Verdict.INCONCLUSIVE
    return Verdict.INCONCLUSIVE if inconclusive and stored.verdict is Verdict.INCONCLUSIVE else Verdict.FAILED
