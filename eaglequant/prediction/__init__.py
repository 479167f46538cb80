"""Predicted acceptance: the draft chained as the engine chains it, on captured inputs (``verify --inputs``).

The engine's greedy drafting rule replayed along the target's own greedy continuation gives the engine's counters
for a source draft and a quantized one on the same sequences, in the figures a measured run reports
(:mod:`eaglequant.measurement.statistics`), so predicted and measured acceptance compare directly. Start at
:func:`predict_written`: a written checkpoint, as the engine serves it, against its source.

- :mod:`.predict`: captured sequences read, the engine's walk replayed, the prediction of one draft and of a pair,
  for every k (tokens drafted a round) from one chain (:func:`~.predict.predict_table`).
- :mod:`.chain`: the draft head run as the engine chains it: step 1 on the target's hidden states, steps 2..k on
  its own; on the CPU, or with its weights held on a CUDA device.
- :mod:`.shared`: what every candidate of a search computes alike, computed once from the source draft.
- :mod:`.figures`: a prediction as records hold it (its figures and verdict, as written), without torch.
"""
