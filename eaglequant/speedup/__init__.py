"""The decode speed-up a draft gives its target, and the k that maximises it: a cost model in bytes, stated or
calibrated on what the engine measured (``explain --target-config``, ``search --objective speedup``, the card).

- :mod:`.target_step`: the target's weight bytes a forward reads, from its safetensors headers or its config, with
  the distinct experts a MoE layer reads for several tokens; a Hub target from its headers alone.
- :mod:`.target_families`: a decoder LLM's weights from its config, one reader per family (Llama, Qwen, DeepSeek-V3
  and Kimi-K2, GLM-4.5, Qwen-MoE, Mixtral, gpt-oss, Llama 4), or a one-line refusal.
- :mod:`.target_kinds`: the bytes a target's own quantization stores each weight in, and the kind its GEMMs run in.
- :mod:`.draft_fit`: a draft that does not fit its target (width, vocabulary, aux layers) refused in one line.
- :mod:`.model`: the speed-up at each k from acceptance(k), the target's forwards and the draft's round; its free
  terms stated or fitted to an engine's measurement.
- :mod:`.calibration`: the terms for one target, stated or fitted to an ``accept`` record's source-draft rounds.
"""
