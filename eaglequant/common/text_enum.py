"""An enum whose members are their text: compared, hashed, formatted and written to JSON as their value."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """``enum.StrEnum`` for Python 3.10 too: ``str(member)`` and f-strings give the value, not ``Class.NAME``."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
