"""Verification of a written checkpoint: structure, copies, scales, per-layer parity, draft-head fidelity, the verdict
it records; against the source its records name, and loaded by the engines' own code (:mod:`.written`).
"""
