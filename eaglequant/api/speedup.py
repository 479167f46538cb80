"""``predicted_speedup()``: the decode speed-up a written draft gives its target at each k, in each engine that
loads it (``explain --target-config``), from the cost model of :mod:`eaglequant.speedup`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from eaglequant.common.draft_tokens import DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.errors import InputError
from eaglequant.speedup.calibration import timing_for
from eaglequant.speedup.draft_fit import check_draft_fits
from eaglequant.speedup.model import SpeedupTable, predict_speedup
from eaglequant.speedup.target_step import target_weights


def predicted_speedup(
    dst: str | Path,
    target: str | Path,
    *,
    acceptance: Mapping[int, float] | None = None,
    acceptance_from: str = "given",
    tensor_parallel_size: int = 1,
    measured: str | Path | None = None,
    engines: list[str] | tuple[str, ...] = (),
) -> list[SpeedupTable]:
    """The predicted speed-up of ``dst`` over ``target`` (a checkpoint directory or its ``config.json``) served on
    ``tensor_parallel_size`` ranks, at each k ``acceptance`` (k -> acceptance length) gives, in each engine that loads
    ``dst``. ``measured``: an ``eaglequant accept`` record whose source-draft rounds calibrate the model's overheads
    (:func:`~eaglequant.speedup.model.calibrate`); without it the stated terms are used, and printed."""
    from eaglequant.api import explain

    if not acceptance:
        raise InputError(
            "no acceptance length to predict the speed-up from",
            hint="predict it (verify DST --inputs CAP records it) or give one: --acceptance 2.62@3",
        )
    check_draft_fits(Path(dst), Path(target))
    weights = target_weights(Path(target), tensor_parallel_size)
    tables = []
    for reading in explain(dst, engines=list(engines)).engines:
        if reading.round_cost is None:
            continue
        timing = timing_for(weights, reading.round_cost, None if measured is None else Path(measured))
        tables.append(predict_speedup(reading.titled, weights, reading.round_cost, acceptance, timing, acceptance_from))
    return tables


def acceptance_at(text: str, up_to: int = DEFAULT_MAX_DRAFT_TOKENS) -> tuple[dict[int, float], str]:
    """``2.62@3`` (a length at a k) as acceptance at k = 1..``up_to`` (:func:`~.model.geometric_acceptance`), and
    where it came from in words."""
    from eaglequant.speedup.model import geometric_acceptance

    length_text, _, k_text = text.partition("@")
    try:
        length, k = float(length_text), int(k_text or "3")
    except ValueError:
        raise InputError(f"acceptance {text!r}: not LENGTH@K", hint="e.g. --acceptance 2.62@3") from None
    said = f"{length:g} at k = {k} (given), carried to other k at a constant per-token rate"
    return geometric_acceptance(length, k, up_to), said
