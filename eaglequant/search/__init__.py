"""Search: the smallest draft within an acceptance budget, or the fastest with its k (``eaglequant search``).

Every whole-draft candidate (scheme, format, ``lm_head``, draft vocabulary) is priced from headers, then they are
converted and predicted from the smallest up until one is within the budget (with ``--objective speedup``, all of
them, and the candidate and k of the highest predicted speed-up win). It runs the conversion job
(:mod:`eaglequant.jobs.conversion`) and the vocabulary's ``prune`` on each candidate, so it sits above them; the API
sits above it. Start at :func:`search`.

- :mod:`.smallest`: :func:`search` and its result, for either objective.
- :mod:`.candidate_loop`: the loop both objectives share: the candidates priced, converted and predicted from the
  smallest up, each a :class:`~eaglequant.search.candidate_loop.SearchPoint`.
- :mod:`.objectives`: which point each objective writes (the smallest within the budget, or the fastest pick) and
  the speed-up objective's cost model.
- :mod:`.budget`: the acceptance a candidate may lose (``--max-acceptance-drop``, ``--rule``).
- :mod:`.candidates`: the candidates, each priced or skipped for a stated reason.
- :mod:`.predictions`: the source predicted once, each candidate predicted while the next one converts.
- :mod:`.sequential`: the planned looks at a candidate, and when an interim look settles its verdict.
- :mod:`.fastest`: ``--objective speedup``: each candidate priced by the speed-up model at every k the budget allows.
- :mod:`.schedule`: ``--concurrency``: each load's k (0: do not speculate), the weighted pick, a tie within the
  model's error, and the ks as vLLM's ``num_speculative_tokens_per_batch_size``.
- :mod:`.outputs`: where the candidates are written, and the winner moved into place.
"""

from eaglequant.search.smallest import search

__all__ = ["search"]
