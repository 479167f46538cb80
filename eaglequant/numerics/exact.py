"""Arithmetic that rounds the same on every device.

torch on a GPU divides by a CPU scalar (a Python number or a 0-dim CPU tensor) by multiplying with its
reciprocal, which rounds twice; on the CPU it divides. ``exp2`` and ``log2`` are library calls whose last
bit is not promised. The vendors' math is defined by what the CPU computes, so the schemes use these
helpers wherever a GPU could round differently.
"""

from __future__ import annotations

import torch

_FLOAT32_MIN_NORMAL_EXPONENT = -126
_FLOAT32_MANTISSA_BITS = 23


def divide(x: torch.Tensor, divisor: float | torch.Tensor) -> torch.Tensor:
    """``x / divisor``, one IEEE division on every device (``divisor`` must be exact in ``x``'s dtype)."""
    if x.device.type != "cpu" and (not isinstance(divisor, torch.Tensor) or divisor.device != x.device):
        divisor = torch.as_tensor(divisor, device=x.device)
    return x / divisor


def power_of_two(exponent: torch.Tensor) -> torch.Tensor:
    """float32 ``2 ** exponent`` for integer exponents in [-149, 128], built from its bits (exact, subnormals
    included; 128 gives inf, as ``exp2`` does)."""
    e = exponent.to(torch.int32)
    normal = (e + 127) << _FLOAT32_MANTISSA_BITS
    subnormal = torch.ones_like(e) << (e + 149).clamp(min=0, max=22)
    return torch.where(e >= _FLOAT32_MIN_NORMAL_EXPONENT, normal, subnormal).view(torch.float32)


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """``floor(log2(x))`` as float32 for x >= 0 in any float dtype: exact, from the exponent ``frexp``
    gives (x = m * 2^e with m in [0.5, 1)); -inf for 0, +inf for inf, as ``log2`` gives."""
    _, exponent = torch.frexp(x.to(torch.float32))
    result = (exponent - 1).to(torch.float32)
    result = torch.where(x == 0, -torch.inf, result)
    return torch.where(torch.isinf(x), torch.inf, result)


# A float's magnitude orders as the integer of its bits without the sign (NaN above infinity).
_MAGNITUDE_BITS = {
    torch.bfloat16: (torch.int16, 0x7FFF),
    torch.float16: (torch.int16, 0x7FFF),
    torch.float32: (torch.int32, 0x7FFFFFFF),
}


def abs_max(x: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    """``x.abs().amax(dim)``, exactly, as the integer maximum of the magnitudes' bits: ~2x faster on the CPU. A NaN
    gives a NaN (its payload is not kept)."""
    if x.dtype not in _MAGNITUDE_BITS:
        return x.abs().amax(dim)
    int_dtype, mask = _MAGNITUDE_BITS[x.dtype]
    return (x.view(int_dtype) & mask).amax(dim).view(x.dtype)
