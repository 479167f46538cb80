"""The model's terms for one target: stated, or fitted to the source draft's rounds an ``eaglequant accept`` record
holds (``--measured ACCEPT.json``)."""

from __future__ import annotations

from pathlib import Path

from eaglequant.common.errors import InputError, given, words
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.model import Timing, calibrate, stated_timing
from eaglequant.speedup.target_step import TargetWeights


def timing_for(target: TargetWeights, source: RoundCost, measured: Path | None) -> Timing:
    """The stated terms (``measured`` None), or those fitted to the rounds of the source draft (``source``: what a
    round of it reads) that ``measured``, an ``accept`` record, holds at each k it timed."""
    stated = stated_timing(target)
    if measured is None:
        return stated
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.measurement.speed import measured_speeds

    if not measured.is_file():
        raise InputError(words(given("measured", str(measured)), ": no such file"), hint="write one: eaglequant accept")
    rounds = [m for m in measured_speeds(load_json_object(measured, measured.name)) if m.label == "source"]
    if not rounds:
        raise InputError(
            words(given("measured", str(measured)), ": no timed round of the source draft"),
            hint="measure with an eaglequant that times decoding: eaglequant accept DST --json",
        )
    return calibrate(target, source.as_source(), rounds, stated, f"{measured.name}'s source draft")
