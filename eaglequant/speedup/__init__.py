"""The decode speed-up a draft gives its target, and the k that maximises it: a cost model in bytes, stated or
calibrated on what the engine measured (``explain --target-config``, ``search --objective speedup``, the card).

- :mod:`.target_step`: the target's weight bytes a forward reads, from its safetensors headers or its config, with
  the distinct experts a MoE layer reads for several tokens.
- :mod:`.model`: the speed-up at each k from acceptance(k), the target's forwards and the draft's round; its free
  terms stated or fitted to an engine's measurement.
- :mod:`.calibration`: the terms for one target, stated or fitted to an ``accept`` record's source-draft rounds.
"""
