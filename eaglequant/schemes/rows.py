"""Row blocks: every scheme's math and error statistics run over blocks of whole rows so that
temporaries stay small whatever the tensor's size."""

from __future__ import annotations

BLOCK_ELEMENTS = 1 << 20


def row_blocks(rows: int, cols: int) -> list[slice]:
    step = max(1, BLOCK_ELEMENTS // max(cols, 1))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]
