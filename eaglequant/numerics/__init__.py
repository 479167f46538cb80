"""The quantization math, one module per vendor flavour, in float32/float64 torch; exact division and powers of two;
row blocks and error statistics.
"""
