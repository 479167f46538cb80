"""Findings: the notes and problems a check reports.

A :class:`Finding` is a value: ``code``, a short stable kebab-case identifier of what was found, one of
:data:`FINDING_CODES` (``"sha256-differs"``, ``"never-loaded"``, ``"no-calib-data"``); ``subject``, the file, tensor
or module it is about ("" if none); and ``message``, the sentence a user reads (``str(finding)``). Programs and tests
compare codes and subjects; the wording may change without breaking them. JSON records write a finding as
``{"code": ..., "subject": ..., "message": ...}``; a finding read back from a bare string (a record written before
findings had codes) gets the code ``unrecorded``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eaglequant.common.finding_codes import FINDING_CODES


@dataclass(frozen=True)
class Finding:
    """A note or problem: its ``code`` (registered in :data:`FINDING_CODES`), ``subject`` and ``message``."""

    code: str
    subject: str
    message: str

    def __post_init__(self) -> None:
        if self.code not in FINDING_CODES:
            raise ValueError(f"unregistered finding code {self.code!r} (see eaglequant.common.finding_codes)")

    def __str__(self) -> str:
        return self.message

    def prefixed(self, prefix: str) -> Finding:
        """The same finding, its message after ``prefix`` (an engine's title, say)."""
        return Finding(self.code, self.subject, prefix + self.message)

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "subject": self.subject, "message": self.message}

    @classmethod
    def from_json(cls, data: Any) -> Finding:
        """A finding as :meth:`to_json` writes it; a bare string (written before findings had codes) as an
        ``unrecorded`` finding. Anything else raises ``ValueError``."""
        if isinstance(data, str):
            return cls("unrecorded", "", data)
        fields = {"code", "subject", "message"}
        if isinstance(data, dict) and set(data) == fields and all(isinstance(v, str) for v in data.values()):
            return cls(data["code"], data["subject"], data["message"])
        raise ValueError("a finding is a string or an object of code, subject and message")


def codes(findings: Iterable[Finding]) -> list[str]:
    """The code of each finding, in order."""
    return [finding.code for finding in findings]


def find(findings: Iterable[Finding], code: str) -> Finding | None:
    """The first finding with ``code``, or None."""
    return next((f for f in findings if f.code == code), None)


def messages(findings: Iterable[Finding]) -> list[str]:
    """The message of each finding, in order."""
    return [finding.message for finding in findings]
