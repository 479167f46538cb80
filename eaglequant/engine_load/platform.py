"""What the machine does to an engine's kernels, as the probe measured it, and the bound the engine's own GEMM is
then held to."""

from __future__ import annotations

from eaglequant.common.findings import Finding

# vLLM's INT8 W8A8 layers (its scheme classes are named ...Int8) run, on CPUs without AMX, a GEMM that is exact
# only with int8 dot-product instructions; a measured error above this means the machine's kernel is not exact.
INEXACT_INT8_GEMM = 0.01


def kernel_bound(
    quant_method: str | None, bound: float | None, int8_gemm_error: float | None, engine: str
) -> tuple[float | None, Finding | None]:
    """The bound an engine's own GEMM of a module (run by ``quant_method``) is held to, and why it differs from the
    scheme's ``bound`` (None: it does not): widened by the machine's own INT8 GEMM error where the probe measured
    that kernel inexact, since it is then the machine's arithmetic, not the checkpoint, that errs."""
    if bound is None or int8_gemm_error is None or int8_gemm_error <= INEXACT_INT8_GEMM:
        return bound, None
    if "Int8" not in (quant_method or ""):
        return bound, None
    note = (
        f"this machine's INT8 GEMM in {engine} is off exact integer arithmetic by {int8_gemm_error:.3f} (no int8 "
        "dot-product instructions): the INT8 layers' bound is widened by it"
    )
    return bound + int8_gemm_error, Finding("inexact-int8-gemm", "", note)
