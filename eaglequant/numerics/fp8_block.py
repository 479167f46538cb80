"""FP8 E4M3 weights with one scale per 128 x 128 block, per vendor flavour.

Both take a block of whole rows starting on a 128-row boundary (the pipeline's row blocks are aligned to
the kind's ``rows_per_scale``) and return (codes float8_e4m3fn [rows, K], scale [ceil(rows/128),
ceil(K/128)]). A partial last block of rows or columns is zero-padded for its amax, which zeros never
change, so its scale is that of its real elements.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eaglequant.numerics.exact import abs_max, divide
from eaglequant.numerics.limits import E4M3_MAX

BLOCK = 128


def _quantize(
    values: torch.Tensor, scale_of: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """codes = fp8(clamp(values / scale, +-448)) per 128 x 128 block, the scale being ``scale_of(block amax)``.

    The blocks are a [row blocks, 128, column blocks, 128] view of the rows, so the codes come out in row order
    with no transposed copy; only a shape that is not a multiple of 128 is zero-padded first (and the codes
    trimmed back)."""
    n, k = values.shape
    if n % BLOCK or k % BLOCK:
        values = torch.nn.functional.pad(values, (0, -k % BLOCK, 0, -n % BLOCK))
    rows, columns = values.shape
    grid = values.reshape(rows // BLOCK, BLOCK, columns // BLOCK, BLOCK)
    scale = scale_of(abs_max(grid, (1, 3)))
    codes = (grid / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    codes = codes.reshape(rows, columns)
    return (codes if (rows, columns) == (n, k) else codes[:n, :k].contiguous()), scale


def compressed_tensors_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llm-compressor ``FP8_BLOCK`` (compressed-tensors ``strategy: block``), its CPU path.

    Everything happens in the weight's dtype D: scale = D(block amax / 448), 0 -> D's eps; q =
    fp8(clamp(D(w / scale), +-448)). The scale is saved in D.
    """

    def scale_of(amax: torch.Tensor) -> torch.Tensor:
        scale = divide(amax, torch.tensor(E4M3_MAX, dtype=weight.dtype))
        return torch.where(scale == 0, torch.tensor(torch.finfo(weight.dtype).eps, dtype=weight.dtype), scale)

    return _quantize(weight, scale_of)


def native_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The engines' native ``fp8`` format (DeepSeek-V3's checkpoints): float32 scale = block amax / 448 (an
    all-zero block gets 1.0: any scale dequantizes its zeros), q = fp8(float32(w) / scale); the scale is
    saved float32 as ``weight_scale_inv`` (a multiplier, despite the name)."""

    def scale_of(amax: torch.Tensor) -> torch.Tensor:
        return torch.where(amax == 0, 1.0, divide(amax, E4M3_MAX))

    return _quantize(weight.to(torch.float32), scale_of)
