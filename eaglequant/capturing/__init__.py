"""Capture: the draft's inputs with the target's choices, written as one capture file (``eaglequant capture``).

What ``--calib``, ``verify --inputs``, ``prune --counts`` and ``search --inputs`` read: at every position of the
target's greedy continuation, the hidden states at the draft's aux layer ids and the target's next token. Start at
:func:`capture`. The file format itself (:mod:`eaglequant.draft.capture_file`, and vLLM's connector files read as
one: :mod:`eaglequant.draft.connector_files`) stays in ``draft/``, where calibration and the token counts read it.

- :mod:`.transformers_capture`: :func:`capture`, the target run here with transformers; and the files other
  pipelines wrote, read into a capture file (:func:`~.transformers_capture.capture_from_specforge`,
  :func:`~.transformers_capture.capture_from_hidden_states`).
- :mod:`.engine_capture`: the capture through the engine that serves the target (vLLM), at any tensor-parallel
  size (``capture --engine``).
- :mod:`.trainer_files`: the hidden-state files EAGLE-3 trainers (SpecForge) already wrote.
- :mod:`.routing`: a MoE target's routing locality, measured from its own router while :func:`capture` runs it
  (its counts in the capture file's header, :mod:`eaglequant.draft.capture_routing`).
"""

from eaglequant.capturing.transformers_capture import capture

__all__ = ["capture"]
