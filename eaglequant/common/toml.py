"""TOML reading on every supported Python: the standard library's ``tomllib`` from 3.11, its backport ``tomli``
(the same code, published by its author) on 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - exercised by the Python 3.10 CI step
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
