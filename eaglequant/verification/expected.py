"""What eaglequant's own reading of a checkpoint (``explain``, and the scheme ``verify`` judges it by) says an
engine's loader must do with it: the :class:`~eaglequant.engine_load.Expectation` that :func:`judge` holds the
engine's report against. Kept apart from the probe runner, which knows nothing of verification."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglequant.engine_load import Expectation, get_probe
from eaglequant.engines.target import TargetModel

if TYPE_CHECKING:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.head import HeadDescription

DEFAULT_TARGET_LAYERS = 61  # Kimi-K2.5 / DeepSeek-V3, when the conversion recorded no target


def expectation(checkpoint: Checkpoint, head: HeadDescription, target: TargetModel, engine: str) -> Expectation:
    """``explain``'s reading of ``checkpoint`` for ``engine``, named for ``target``'s layer count (61 when
    unknown), as the plan the engine's own load is held against."""
    from eaglequant.readback.explanation import explain_checkpoint
    from eaglequant.record.report import read_report
    from eaglequant.record.schemes import checkpoint_schemes

    get_probe(engine)
    if target.count is None:
        target = TargetModel(DEFAULT_TARGET_LAYERS, f"{DEFAULT_TARGET_LAYERS} (none recorded)")
    explanation = explain_checkpoint(checkpoint, head, [engine], target)
    reading = explanation.engines[0]
    planned = {module.runtime_name: module.scheme is not None for module in reading.modules}
    schemes, _ = checkpoint_schemes(checkpoint, read_report(checkpoint.root))  # as verify judges it
    limit = max(scheme.verify.max_relative_error for scheme in schemes.schemes)
    assert target.count is not None
    weight_only = explanation.kinds.activation is None
    return Expectation(engine, target.count, planned, limit, reading.loads, reading.note, weight_only)
