"""Format limits the math and the kinds share (no torch here: kinds are read by light commands)."""

E4M3_MAX = 448.0  # the largest finite FP8 E4M3 (fn) value
