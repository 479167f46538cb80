"""A written checkpoint read back as its conversion recorded it: opened with the head it was made from
(:mod:`eaglequant.readback.written_head`) and the target's layer count its report recorded, and explained as each
engine reads it for the engines its report recorded (where the caller names neither)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.engines.target import TargetModel, resolve_target
from eaglequant.layouts.head import HeadDescription

if TYPE_CHECKING:
    from eaglequant.readback.explanation import Explanation


@contextmanager
def open_written(
    dst: str | Path,
    target_layers: int | None,
    target_config: str | Path | None,
    target: TargetModel | None = None,
) -> Iterator[tuple[Checkpoint, HeadDescription, TargetModel]]:
    """A quantized checkpoint, the head it was made from, and the target's layer count (``target``; or given by
    ``target_layers`` / ``target_config``; or else the one its conversion recorded in ``dst``'s report)."""
    from eaglequant.readback.written_head import describe_written_head
    from eaglequant.record.report import read_report

    with Checkpoint.open(dst, "DST") as checkpoint:
        head = describe_written_head(checkpoint)
        if target is None and target_layers is None and target_config is None:
            recorded = read_report(Path(dst))
            if recorded is not None and recorded.target_layers.count is not None:
                target = recorded.target_layers.recorded()
        yield checkpoint, head, target or resolve_target(target_layers, target_config, head.config)


def explain_written(
    dst: str | Path,
    engines: Sequence[str],
    target_layers: int | None,
    target_config: str | Path | None,
    draft_tokens: int,
) -> Explanation:
    """How each engine reads the checkpoint in ``dst`` (:func:`~eaglequant.readback.explanation.explain_checkpoint`):
    the engines chosen, or those its report recorded; ``all`` among them: every engine."""
    from eaglequant.engines import ALL_ENGINES, chosen_engines
    from eaglequant.readback.explanation import explain_checkpoint
    from eaglequant.record.report import read_report, recorded_engines

    names = None if ALL_ENGINES in engines else chosen_engines(engines) or recorded_engines(read_report(Path(dst)))
    with open_written(dst, target_layers, target_config) as (checkpoint, head, target):
        return explain_checkpoint(checkpoint, head, names, target, draft_tokens)
