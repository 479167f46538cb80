"""``predicted_speedup()``: the decode speed-up a written draft gives its target at each k, in each engine that
loads it (``explain --target-config``), from the cost model of :mod:`eaglequant.speedup`
(:mod:`eaglequant.speedup.written_draft`)."""

from eaglequant.speedup.written_draft import Serving, acceptance_at, as_trained, predicted_speedup

__all__ = ["Serving", "acceptance_at", "as_trained", "predicted_speedup"]
