"""A quantized checkpoint opened for reading back: the head it was made from and the target's layer count."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.engines.target import TargetModel, resolve_target
from eaglequant.layouts.head import HeadDescription


@contextmanager
def open_written(
    dst: str | Path,
    target_layers: int | None,
    target_config: str | Path | None,
    target: TargetModel | None = None,
) -> Iterator[tuple[Checkpoint, HeadDescription, TargetModel]]:
    """A quantized checkpoint, the head it was made from, and the target's layer count (``target``; or given by
    ``target_layers`` / ``target_config``; or else the one its conversion recorded in ``dst``'s report)."""
    from eaglequant.readback.written import describe_written_head
    from eaglequant.record.report import read_report

    with Checkpoint.open(dst, "DST") as checkpoint:
        head = describe_written_head(checkpoint)
        if target is None and target_layers is None and target_config is None:
            recorded = read_report(Path(dst))
            if recorded is not None and recorded.target_layers.count is not None:
                target = recorded.target_layers.recorded()
        yield checkpoint, head, target or resolve_target(target_layers, target_config, head.config)
