"""Benchmarks users can run: ``eaglequant bench kernels`` (fused dequant-GEMM kernels)."""
