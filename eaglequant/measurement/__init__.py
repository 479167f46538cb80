"""Acceptance length, measured with the serving engine's own speculative decoding (``eaglequant accept``).

``accept`` serves a target with the source draft and with each quantized draft (vLLM's
``speculative_config={"method": "eagle3", ...}``, in the engine's own interpreter), reads the engine's own
spec-decode counters per prompt and times its decode, and reports for each draft, decoding mode and k the
acceptance length and the per-position acceptance rate with confidence intervals, the difference against the
source draft, whether greedy output equals the target's alone (speculative decoding is lossless: a difference is
a defect), and the decode tokens per second with the speed-up over the target alone. Where the
engine runs is one typed choice (:data:`~.runners.Where`): offline, launched servers, or running servers. Start at
:func:`accept`.

- :mod:`.runners`: :func:`accept`, and the three places it runs, each its own runner
  (:class:`~.runners.Offline`, :class:`~.runners.Launched`, :class:`~.runners.Servers`).
- :mod:`.measure`: the runs of one comparison, each through a runner, and :class:`~.measure.AcceptanceReport`.
- :mod:`.launch`: vLLM's OpenAI-compatible server started by eaglequant, once per run (``--launch``).
- :mod:`.server`: a running server measured through its ``/metrics`` counters (``--server``).
- :mod:`.spec_counters`: vLLM's spec-decode counters as a server exposes them.
- :mod:`.engine_args`: the engine arguments passed through (``--tensor-parallel-size``, ``--engine-arg``).
- :mod:`.served`: the draft directory the engine is given (a quantized draft as stored, or its weights
  dequantized where the engine has no kernel for them on this hardware).
- :mod:`.prompts`: prompt files, and the bundled held-out prompts.
- :mod:`.concurrency`: output throughput with at most C requests in flight (``accept --concurrency``).
- :mod:`.limits`: what a measurement can physically be (acceptance in [1, k + 1], a speed-up at most the acceptance
  length, the target alone's drift between its runs), each a finding.
- :mod:`.statistics`: acceptance figures and their intervals from per-prompt counters (prompts as clusters).
- :mod:`.record`: ``eaglequant_accept.json``, written and read back as the model card shows it.
- :mod:`.speed`: the decode speed-ups measured, read back typed per draft and k (:func:`~.speed.measured_speeds`).
"""

from eaglequant.measurement.runners import accept

__all__ = ["accept"]
