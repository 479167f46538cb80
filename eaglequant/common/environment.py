"""Environment switches, read as huggingface_hub reads its own (``constants._is_true``)."""

from __future__ import annotations

import os

TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


def env_true(name: str) -> bool:
    """1, ON, YES, TRUE (any case) are true; anything else, unset included, is false."""
    return os.environ.get(name, "").strip().upper() in TRUE_VALUES
