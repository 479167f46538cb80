"""Batch conversion from job files: the jobs (``jobs``), what is checked before any runs (``checks``), the Hub as the
record of what is done (``record``), and the run's summary (``summary``).

``eaglequant.batch.run_batch`` and ``load_jobs`` are the public entry points; they are imported on first use so
that reading a summary does not load the conversion code.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_jobs", "run_batch"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from eaglequant.batch import jobs

        return getattr(jobs, name)
    raise AttributeError(f"module 'eaglequant.batch' has no attribute {name!r}")
