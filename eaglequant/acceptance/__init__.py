"""Acceptance length, measured with the serving engine's own speculative decoding.

``eaglequant accept`` serves a target with the source draft and with each quantized draft (vLLM's
``speculative_config={"method": "eagle3", ...}``, in the engine's own interpreter), reads the engine's own
spec-decode counters per prompt, and reports for each draft and decoding mode the acceptance length and the
per-position acceptance rate with confidence intervals, the difference against the source draft, and whether
greedy output equals the target's alone (speculative decoding is lossless: a difference is a defect).

- :mod:`.prompts`: prompt files, and the bundled held-out prompts.
- :mod:`.served`: the draft directory the engine is given (a quantized draft as stored, or its weights
  dequantized where the engine has no kernel for them on this hardware).
- :mod:`.statistics`: acceptance figures and their intervals from per-prompt counters (prompts as clusters).
- :mod:`.measure`: the engine runs, and :class:`AcceptanceReport`.
"""
