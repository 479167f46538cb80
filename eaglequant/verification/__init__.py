"""Verification of a written checkpoint: structure, copies, scales, per-layer parity, draft-head fidelity, the verdict
it records.
"""
