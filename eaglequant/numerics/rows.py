"""Row blocks: every scheme's math and error statistics run over blocks of whole rows so that
temporaries stay small whatever the tensor's size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BLOCK_ELEMENTS = 1 << 18  # 1 MB of float32 temporaries: they stay in a core's L2 cache


def row_blocks(rows: int, cols: int, block_elements: int = BLOCK_ELEMENTS, align: int = 1) -> list[slice]:
    """Slices of about ``block_elements`` elements of whole rows, each starting on a multiple of ``align`` (the
    rows sharing one scale)."""
    step = max(1, block_elements // max(cols, 1))
    step = max(align, step - step % align)
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def by_row_blocks(
    weight: torch.Tensor,
    rows_fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
    outputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
) -> tuple[torch.Tensor, ...]:
    """Run ``rows_fn`` on each row block of ``weight`` and assemble its results into tensors of the given
    (shape, dtype), whose first dimension is the row: works wherever a row's result needs only that row."""
    import torch

    if weight.device.type != "cpu":  # a GPU takes the whole block at once: row blocks only save CPU cache
        return rows_fn(weight)
    assembled = tuple(torch.empty(shape, dtype=dtype) for shape, dtype in outputs)
    for rows in row_blocks(*weight.shape):
        for target, part in zip(assembled, rows_fn(weight[rows]), strict=True):
            target[rows] = part
    return assembled
