"""The decode speed-up a draft gives its target, and the k that maximises it, at the concurrency served: a roofline
cost model in bytes and operations, stated or calibrated on what the engine measured (``explain --target-config``,
``search --objective speedup``, the card).

- :mod:`.target_step`: the target's weight bytes a forward reads, from its safetensors headers or its config, with
  the distinct experts a MoE layer reads for several sequences' tokens (their routing locality, expert parallelism).
- :mod:`.target_families`: a decoder LLM's weights from its config, one reader per family (Llama, Qwen, DeepSeek-V3
  and Kimi-K2, GLM-4.5, Qwen-MoE, Mixtral, gpt-oss, Llama 4), or a one-line refusal.
- :mod:`.target_kinds`: the bytes a target's own quantization stores each weight in, and the kind its GEMMs run in.
- :mod:`.draft_fit`: a draft that does not fit its target (width, vocabulary, aux layers) refused in one line.
- :mod:`.hardware`: named accelerators' bandwidth and dense peaks, each with its vendor's source, or the user's own.
- :mod:`.roofline`: what a forward computes, in seconds at the accelerator's peak.
- :mod:`.model`: the speed-up at each k and concurrency from acceptance(k), the target's forwards and the draft's
  round, at most the acceptance length and with its interval; its free terms stated or fitted, with residuals.
- :mod:`.calibration`: the terms for one target, stated or fitted to an ``accept`` record's source-draft rounds
  (the comparative record or one server's), refusing a record of another target, engine or device.
- :mod:`.locality`: the routing locality priced: stated, fitted, or measured by ``capture`` from the target's router
  (checked to be the target's routing).
- :mod:`.written_draft`: a written draft's speed-up over its target in each engine that loads it, the BF16 head it
  was converted from beside it (:func:`eaglequant.predicted_speedup`).
"""
