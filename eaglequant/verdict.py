"""The verdict a destination records of its ``convert --verify``, as ``upload`` and ``batch`` judge it: a pass
needs the report and ``eaglequant_verify.json`` (whose SHA-256 the report lists) to agree it passed; and the rule
by which ``upload`` refuses a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.report import readable_report

if TYPE_CHECKING:
    from eaglequant.verification import VerifyReport


def recorded_verification(dst: Path) -> dict[str, Any] | None:
    """The verification ``convert --verify`` stored in ``dst`` (None: none, or unreadable)."""
    from eaglequant.verification import VERIFY_NAME

    try:
        data = json.loads((dst / VERIFY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recorded_verdict(dst: Path) -> str | None:
    """PASSED when ``dst``'s report and its verification file agree that parity and fidelity passed, FAILED when
    either says otherwise (or the file is gone), None when nothing is recorded (no report, or not verified when
    written). A report of version 1 records no verdict: the file alone decides."""
    from eaglequant.verification import FAILED, PASSED

    report = readable_report(dst)
    if report is None or (report.report_version >= 2 and report.verification is None):
        return None
    stored = recorded_verification(dst)
    if stored is None:
        return None if report.verification is None else FAILED
    summary = report.verification
    passed = summary is None or (summary.ok and summary.verdict == PASSED)
    passed = passed and stored.get("ok") is True and stored.get("verdict", PASSED) == PASSED
    return PASSED if passed and stored.get("layers") else FAILED


UPLOAD_HINTS = {
    "failed": "run `eaglequant verify` on it and fix the conversion, or pass force=True to upload anyway",
    "not verified numerically": "pass source=SRC (the checkpoint it was made from), or convert it with "
    "verify_output=True; force=True uploads it anyway",
}


def upload_refusal(report: VerifyReport) -> str | None:
    """Why ``upload`` refuses a checkpoint with this verification (None: it may go)."""
    from eaglequant.verification import FAILED, NOT_VERIFIED, PASSED

    if report.verdict == FAILED:
        problems = report.problems
        return f"fails verify ({problems[0]}{f'; {len(problems) - 1} more' if len(problems) > 1 else ''})"
    if report.verdict == NOT_VERIFIED:
        recorded = recorded_verdict(report.destination)
        if recorded == PASSED:
            return None
        what = "recorded a failure" if recorded == FAILED else "recorded none"
        return f"not verified numerically: no source to check it against, and its conversion {what}"
    return None
