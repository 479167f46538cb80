"""``predicted_speedup()``: the decode speed-up a written draft gives its target at each k, in each engine that
loads it (``explain --target-config``), from the cost model of :mod:`eaglequant.speedup`
(:mod:`eaglequant.speedup.written_draft`)."""

from eaglequant.speedup.written_draft import Serving, acceptance_at, predicted_speedup, unquantized

__all__ = ["Serving", "acceptance_at", "predicted_speedup", "unquantized"]
