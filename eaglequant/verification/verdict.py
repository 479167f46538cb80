"""The verdict a destination records of its ``convert --verify``, as ``upload`` and ``batch`` judge it: a pass
needs the report and ``eaglequant_verify.json`` (whose SHA-256 the report lists) to agree it passed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eaglequant.record.report import readable_report


def recorded_verification(dst: Path) -> dict[str, Any] | None:
    """The verification ``convert --verify`` stored in ``dst`` (None: none, or unreadable)."""
    from eaglequant.verification.verify import VERIFY_NAME

    try:
        data = json.loads((dst / VERIFY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recorded_verdict(dst: Path) -> str | None:
    """PASSED when ``dst``'s report and its verification file agree that parity and fidelity passed, FAILED when
    either says otherwise (or the file is gone), None when nothing is recorded (no report, or not verified when
    written). A report of version 1 records no verdict: the file alone decides."""
    from eaglequant.verification.verify import FAILED, PASSED

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
