"""FP8 E4M3 weights with one scale per 128 x 128 block, per vendor flavour.

Both take a block of whole rows starting on a 128-row boundary (the pipeline's row blocks are aligned to
the kind's ``rows_per_scale``) and return (codes float8_e4m3fn [rows, K], scale [ceil(rows/128),
ceil(K/128)]). A partial last block of rows or columns is zero-padded for its amax, which zeros never
change, so its scale is that of its real elements.
"""

from __future__ import annotations

import torch

from eaglequant.kinds.base import E4M3_MAX
from eaglequant.schemes.exact import abs_max, divide

BLOCK = 128


def _blocks(weight: torch.Tensor) -> torch.Tensor:
    """[rows, K] -> [row blocks, column blocks, 128, 128], zero-padded."""
    n, k = weight.shape
    padded = torch.nn.functional.pad(weight, (0, -k % BLOCK, 0, -n % BLOCK))
    return padded.reshape(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK).transpose(1, 2)


def _unblock(codes: torch.Tensor, n: int, k: int) -> torch.Tensor:
    rows, cols = codes.shape[0] * BLOCK, codes.shape[1] * BLOCK
    return codes.transpose(1, 2).reshape(rows, cols)[:n, :k].contiguous()


def _grid(weight: torch.Tensor) -> torch.Tensor | None:
    """[rows, K] -> [row blocks, 128, column blocks, 128], a view, when both are multiples of 128 (else None): the
    blocks stay in place, so the codes come out in row order with no copy (2x faster than :func:`_blocks`)."""
    n, k = weight.shape
    if n % BLOCK or k % BLOCK:
        return None
    return weight.reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK)


def compressed_tensors_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llm-compressor ``FP8_BLOCK`` (compressed-tensors ``strategy: block``), its CPU path.

    Everything happens in the weight's dtype D: scale = D(block amax / 448), 0 -> D's eps; q =
    fp8(clamp(D(w / scale), +-448)). The scale is saved in D.
    """

    def scale_of(amax: torch.Tensor) -> torch.Tensor:
        scale = divide(amax, torch.tensor(E4M3_MAX, dtype=weight.dtype))
        return torch.where(scale == 0, torch.tensor(torch.finfo(weight.dtype).eps, dtype=weight.dtype), scale)

    grid = _grid(weight)
    if grid is not None:
        scale = scale_of(abs_max(grid, (1, 3)))
        codes = (grid / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return codes.reshape(weight.shape), scale
    blocks = _blocks(weight)
    scale = scale_of(abs_max(blocks, (2, 3)))
    codes = (blocks / scale[:, :, None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return _unblock(codes, *weight.shape), scale


def native_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The engines' native ``fp8`` format (DeepSeek-V3's checkpoints): float32 scale = block amax / 448 (an
    all-zero block gets 1.0: any scale dequantizes its zeros), q = fp8(float32(w) / scale); the scale is
    saved float32 as ``weight_scale_inv`` (a multiplier, despite the name)."""

    def scale_of(amax: torch.Tensor) -> torch.Tensor:
        amax = amax.to(torch.float32)
        return torch.where(amax == 0, 1.0, divide(amax, E4M3_MAX))

    grid = _grid(weight)
    if grid is not None:
        scale = scale_of(abs_max(grid, (1, 3)))
        codes = (grid.to(torch.float32) / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX)
        return codes.to(torch.float8_e4m3fn).reshape(weight.shape), scale
    blocks = _blocks(weight.to(torch.float32))
    scale = scale_of(abs_max(blocks, (2, 3)))
    codes = (blocks / scale[:, :, None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return _unblock(codes, *weight.shape), scale
