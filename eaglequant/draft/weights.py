"""A draft head's tensors by canonical name, read a block of rows at a time, and linears computed that way.

The reference forward (calibration, verification) never holds a whole large weight: a linear's output is
computed one block of output rows at a time, and an embedding lookup reads only the rows it needs, so memory
holds one block whatever the head's size (the full-size Kimi-K2.5 lm_head alone is 2.35 GB of bf16).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from eaglequant.layouts.head import Role
from eaglequant.numerics.rows import row_blocks

if TYPE_CHECKING:
    import torch

    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.head import HeadDescription

STREAM_ELEMENTS = 1 << 23  # weights per block of rows read (16 MB of bf16)
_SCRATCH = threading.local()  # per thread: slot -> a float32 buffer that blocks of rows are widened into


class CanonicalWeights:
    """Tensors by canonical name (``layers.0.mlp.up_proj.weight``); calling it reads a whole tensor (for the
    small ones: norms, biases)."""

    def __init__(self, checkpoint: Checkpoint, head: HeadDescription) -> None:
        self.checkpoint = checkpoint
        self.names = {
            f"{t.module}.{t.name.rsplit('.', 1)[-1]}": t.name for t in head.tensors if t.role is not Role.OTHER
        }

    def __call__(self, name: str) -> torch.Tensor:
        return self.checkpoint.read(self.names[name])

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.checkpoint.tensors[self.names[name]].shape)

    def dtype(self, name: str) -> str:
        """The safetensors dtype of tensor ``name`` (``"BF16"``, ``"F32"``, ...)."""
        return str(self.checkpoint.tensors[self.names[name]].dtype)

    def rows(self, name: str, rows: slice) -> torch.Tensor:
        return self.checkpoint.read_rows(self.names[name], rows)

    def row_blocks(self, name: str, align: int = 1) -> list[slice]:
        """Blocks of output rows of ``name``, each starting on a multiple of ``align``."""
        out_features, in_features = self.shape(name)
        return row_blocks(out_features, in_features, STREAM_ELEMENTS, align)

    def gather(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (any order, repeats allowed) of tensor ``name``, reading each distinct row once."""
        import torch

        unique, where = torch.unique(ids, return_inverse=True)
        rows = torch.stack([self.rows(name, slice(i, i + 1))[0] for i in unique.tolist()])
        return rows[where]


def unmapped_when_freed(threshold: int = 4 << 20) -> None:
    """Have glibc serve every allocation of ``threshold`` bytes or more by a mapping of its own, given back to the
    system when freed. By default the threshold rises to the largest block freed so far (up to 32 MiB), after which
    blocks of rows (16-32 MB each) come from the heap, where freed ones stay resident, fragmented: ``verify`` of
    the full-size Llama head peaked at 1.46-1.77 GiB that way, 0.94 GiB with the threshold fixed. Not glibc: a
    no-op."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, threshold)  # M_MMAP_THRESHOLD


def widened(block: torch.Tensor, slot: str = "weight") -> torch.Tensor:
    """``block`` as float32 (the same values: every narrower float widens exactly), written into a buffer this thread
    reuses for ``slot``: valid until its next call with the same slot. ``block.to(torch.float32)`` would allocate a
    fresh 32 MB tensor for every block of rows, and its page faults cost a fifth of the GEMM that reads it."""
    import torch

    if block.dtype == torch.float32:
        return block
    buffers: dict[str, torch.Tensor] = _SCRATCH.__dict__.setdefault("buffers", {})
    buffer = buffers.get(slot)
    if buffer is None or buffer.numel() < block.numel():
        buffer = buffers[slot] = torch.empty(block.numel(), dtype=torch.float32)
    return buffer[: block.numel()].view(block.shape).copy_(block)


def by_output_rows(
    tokens: int, out_features: int, blocks: list[slice], product: Callable[[slice], torch.Tensor]
) -> torch.Tensor:
    """float32 [tokens, out_features] of a linear, one block of its output rows (``product(rows)``) at a time."""
    import torch

    out = torch.empty(tokens, out_features, dtype=torch.float32)
    for rows in blocks:
        out[:, rows] = product(rows).to(torch.float32).cpu()
    return out
