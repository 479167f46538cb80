"""Findings: the notes and problems a check reports.

A :class:`Finding` is a ``str`` whose value is the sentence a user reads, so JSON records, tables and joins print
exactly that sentence, and it carries what a program needs to tell findings apart: ``code``, a short stable
kebab-case identifier of what was found (``"sha256-differs"``, ``"never-loaded"``, ``"no-calib-data"``), and
``subject``, the file, tensor or module it is about ("" if none). Programs and tests compare codes and subjects; the
wording may change without breaking them. Text operations (``+``, f-strings, ``join``) give plain strings;
:meth:`Finding.prefixed` keeps the code and subject.
"""

from __future__ import annotations

from collections.abc import Iterable


class Finding(str):
    """A note or problem: its text as the ``str`` value, with ``code`` and ``subject``."""

    code: str
    subject: str

    def __new__(cls, code: str, subject: str, text: str) -> Finding:
        finding = super().__new__(cls, text)
        finding.code = code
        finding.subject = subject
        return finding

    def __getnewargs__(self) -> tuple[str, str, str]:  # type: ignore[override]
        # copy and pickle rebuild a str subclass from these arguments
        return self.code, self.subject, str(self)

    def __repr__(self) -> str:
        return f"Finding({self.code!r}, {self.subject!r}, {str(self)!r})"

    def prefixed(self, prefix: str) -> Finding:
        """The same finding, its text after ``prefix`` (an engine's title, say)."""
        return Finding(self.code, self.subject, prefix + self)


def codes(findings: Iterable[str]) -> list[str]:
    """The code of each finding, in order ("" for a plain string)."""
    return [getattr(finding, "code", "") for finding in findings]


def find(findings: Iterable[str], code: str) -> Finding | None:
    """The first finding with ``code``, or None."""
    return next((f for f in findings if isinstance(f, Finding) and f.code == code), None)
