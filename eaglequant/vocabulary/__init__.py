"""A pruned draft vocabulary: the tokens the target emits most often, counted, chosen and written (``eaglequant
prune``). Start at :func:`~.pruning.prune`.

- :mod:`.pruning`: :func:`~.pruning.prune`: the pruned head written, with the acceptance of both drafts predicted.
- :mod:`.counts`: the token counts, from captured inputs or a count file.
- :mod:`.prune`: the tokens kept, and the pruned head's tensors and config.
"""
