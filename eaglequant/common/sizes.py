"""Byte counts as every output shows them: decimal units (kB, MB, GB, TB), as engine memory bandwidth is quoted, so
that a size and a bandwidth divide without a factor of 1.024 hiding between them."""

from __future__ import annotations

_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def decimal_bytes(count: float) -> str:
    """``11.41 GB``, ``851.97 kB``, ``512 B``: the largest decimal unit the count reaches, two decimals."""
    for unit, size in _UNITS:
        if abs(count) >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count:.0f} B"
