"""The model's terms for one target: stated, or fitted to the source draft's rounds an ``eaglequant accept`` record
holds (``--measured ACCEPT.json``): the comparative record (``eaglequant_accept.json``, ``accept --json``) or one
server's (``accept --server URL --json``, whose target alone is not measured: its forward overhead stays stated).

A record from another target, engine build or device than the one priced is refused, naming the field: its times
price another machine.

A comparative record measured at several concurrencies (``accept --concurrency 1,2,4,8``) is fitted in two parts
(:func:`fitted_at_concurrency`): the target forward's fixed cost and its cost a sequence to the target alone's rate
at every C it holds (:func:`~eaglequant.speedup.model.calibrate_target_steps`), then the round's terms to the source
draft's passes at ONE C (the smallest, or ``fit_concurrency``); the speed-ups at the other C are then predictions,
never fitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.hardware import Accelerator
from eaglequant.speedup.model import (
    ROUTING_LOCALITY,
    MeasuredRound,
    Timing,
    calibrate,
    calibrate_locality,
    calibrate_target_steps,
    stated_timing,
)
from eaglequant.speedup.target_step import TargetWeights


@dataclass(frozen=True)
class ServerRound:
    """One server's draft at its k: acceptance and the decode seconds a token with it (the target alone unknown)."""

    draft_tokens: int
    acceptance_length: float
    drafted_seconds_per_token: float
    alone_seconds_per_token: float = math.nan


def timing_for(
    target: TargetWeights,
    source: RoundCost,
    measured: Path | None,
    *,
    hardware: Accelerator | None = None,
    routing_locality: float = ROUTING_LOCALITY,
    concurrency: int = 1,
    draft_tensor_parallel_size: int | None = None,
    fit_locality: bool = False,
    draft_kv_bytes_per_position: float = 0.0,
    fit_concurrency: int | None = None,
) -> Timing:
    """The stated terms (``measured`` None), or those fitted to the rounds of the source draft (``source``: what a
    round of it reads) that ``measured``, an ``accept`` record, holds at each k it timed, at ``concurrency`` (the
    load its rounds ran at: 1 for prompts sent one at a time); with ``fit_locality``, the routing locality fitted
    too (three k or more). A record with the target alone steady at two concurrencies or more (``accept
    --concurrency``) is fitted at them (:func:`fitted_at_concurrency`), the round's terms at ``fit_concurrency``
    (None: the smallest C with a timed round of the source draft); ``concurrency`` is then the pass's own C."""
    stated = stated_timing(target, hardware=hardware, routing_locality=routing_locality)
    if measured is None and fit_concurrency is not None:
        raise InputError(
            f"fitting at concurrency {fit_concurrency} needs a measurement, and none is given",
            hint="give one: --measured ACCEPT.json (accept --concurrency 1,2,4,8)",
        )
    if measured is None:
        if fit_locality:
            raise InputError(
                "the routing locality is fitted to a measurement, and none is given",
                hint="give one: --measured ACCEPT.json, or state it: --routing-locality 0.5",
            )
        return stated
    from eaglequant.checkpoint.reader import load_json_object

    if not measured.is_file():
        raise InputError(words(given("measured", str(measured)), ": no such file"), hint="write one: eaglequant accept")
    data = load_json_object(measured, str(measured))
    if "server" in data and "source" not in data:
        _same(measured, "version", str(data.get("version")), source.release, "engine release")
        settings = data.get("settings")
        if isinstance(settings, dict) and isinstance(settings.get("target"), str):
            _same(measured, "settings.target", _name(settings["target"]), target.name.lower(), "target")
        if fit_concurrency is not None:
            raise InputError(
                f"{measured}: one server's record, measured at one load, has no concurrency to fit at "
                f"(C = {fit_concurrency} given)",
                hint="drop --fit-at, or fit a comparative record: accept DST --concurrency 1,2,4,8 --json",
            )
        rounds: list[Any] = _server_rounds(data, measured)
        what = f"{measured.name}'s server (its target alone not measured: the target's forward overhead as stated)"
    else:
        rounds, steps, concurrency = _source_rounds(data, measured, target, source, stated, fit_concurrency)
        if steps:
            return fitted_at_concurrency(
                target, source, steps, rounds, stated, measured.name, concurrency, fit_locality=fit_locality,
                draft_tensor_parallel_size=draft_tensor_parallel_size,
                draft_kv_bytes_per_position=draft_kv_bytes_per_position,
            )  # fmt: skip
        what = f"{measured.name}'s source draft"
    if not rounds:
        raise InputError(
            words(given("measured", str(measured)), ": no timed round of the source draft"),
            hint="measure with an eaglequant that times decoding: eaglequant accept DST --json",
        )
    fit = calibrate_locality if fit_locality else calibrate
    return fit(target, source.as_source(), rounds, stated, what, concurrency=concurrency,
               draft_tensor_parallel_size=draft_tensor_parallel_size,
               draft_kv_bytes_per_position=draft_kv_bytes_per_position)  # fmt: skip


def fitted_at_concurrency(
    target: TargetWeights,
    source: RoundCost,
    steps: Mapping[int, float],
    rounds: Sequence[MeasuredRound],
    stated: Timing,
    what: str,
    concurrency: int,
    *,
    fit_locality: bool = False,
    token_share: float = 1.0,
    draft_tensor_parallel_size: int | None = None,
    draft_kv_bytes_per_position: float = 0.0,
) -> Timing:
    """``stated`` with the target forward's terms fitted to the target alone's ``steps`` (C -> seconds a decode step
    at C; ``token_share`` of its cost a sequence taken as a token's), then the round's fitted to the source draft's
    ``rounds`` (what a round of ``source`` reads) at ``concurrency`` alone: the speed-ups at every other C are left
    to predict. Each fit's residuals are the terms' (``step_residuals``, ``residuals``)."""
    if not rounds:
        raise InputError(
            f"{what}: no timed round of the source draft at concurrency {concurrency} to fit the round's terms on",
            hint="fit at a C where the source draft's speed-up was a result, or measure again: accept --concurrency",
        )
    loads = ", ".join(str(c) for c in sorted(steps))
    steady = calibrate_target_steps(target, stated, steps, f"{what} (the target alone)", token_share)
    said = (
        f"{what}: the target forward's to the target alone at C = {loads}, the round's to the source draft at "
        f"C = {concurrency} only"
    )
    fit = calibrate_locality if fit_locality else calibrate
    return fit(target, source.as_source(), rounds, steady, said, concurrency=concurrency,
               draft_tensor_parallel_size=draft_tensor_parallel_size,
               draft_kv_bytes_per_position=draft_kv_bytes_per_position)  # fmt: skip


def _source_rounds(
    data: dict[str, Any],
    path: Path,
    target: TargetWeights,
    source: RoundCost,
    stated: Timing,
    fit_concurrency: int | None,
) -> tuple[list[Any], dict[int, float], int]:
    """The source draft's timed rounds of a comparative record, once its target, engine and device are checked;
    with the target alone at two concurrencies or more, its seconds a step at each C and the rounds at the C fitted
    at (else no steps, the rounds one prompt at a time, C = 1)."""
    from eaglequant.measurement.record import AcceptanceRecord
    from eaglequant.measurement.speed import alone_steps_by_concurrency, measured_speeds

    record = AcceptanceRecord.from_json(data, str(path))
    _same(path, "settings.target", _name(record.settings.target), target.name.lower(), "target")
    _same(path, "engine", record.engine, source.engine, "engine")
    _same(path, "version", record.version, source.release, "engine release")
    if record.device == "cpu" and stated.hardware.source != "given":
        raise InputError(
            f"{path}: 'device' is cpu (an engine's CPU build), and the target is priced on {stated.hardware.name}: "
            "its times price another machine",
            hint="measure on the accelerator priced, or price the CPU with its own figures: --bandwidth --peak",
        )
    steps = alone_steps_by_concurrency(data, str(path))
    if len(steps) < 2:
        if fit_concurrency is not None:
            raise InputError(
                f"{path}: the target alone is measured at {len(steps)} concurrencies (steady), and fitting at "
                f"C = {fit_concurrency} needs two or more",
                hint="measure at several loads: accept --concurrency 1,2,4,8",
            )
        return [m for m in measured_speeds(data, str(path)) if m.label == "source"], {}, 1
    timed = [c for c in sorted(steps) if any(m.label == "source" for m in measured_speeds(data, str(path), c))]
    at = fit_concurrency if fit_concurrency is not None else (timed or sorted(steps))[0]
    if at not in steps:
        raise InputError(
            f"{path}: no steady rate of the target alone at C = {at} to fit the round at (measured at: "
            f"{', '.join(str(c) for c in sorted(steps))})",
            hint="fit at one of those C",
        )
    return [m for m in measured_speeds(data, str(path), at) if m.label == "source"], steps, at


def _name(target: str) -> str:
    """A target as a record names it (a path or a Hub repo id), as a priced target is named: its last component."""
    return Path(target.rstrip("/")).name.lower()


def _same(path: Path, field: str, recorded: str, priced: str, what: str) -> None:
    if recorded != priced:
        raise InputError(
            f"{path}: {field!r} is {recorded!r}, and the {what} priced is {priced!r}: its times price another one",
            hint="give the record measured on what is priced (or price what it measured)",
        )


def _server_rounds(data: dict[str, Any], path: Path) -> list[ServerRound]:
    """One server's greedy mode (the first it measured) as a round; a window of live traffic has no decode rate."""
    modes = data.get("modes")
    k = data.get("draft_tokens")
    if not isinstance(modes, dict) or not modes or not isinstance(k, int):
        return []
    mode = next(iter(modes.values()))
    rate = mode.get("decode_tokens_per_second") if isinstance(mode, dict) else None
    length = mode.get("acceptance_length") if isinstance(mode, dict) else None
    length = length.get("value") if isinstance(length, dict) else length
    if not isinstance(rate, (int, float)) or not rate > 0 or not isinstance(length, (int, float)):
        return []
    return [ServerRound(k, float(length), 1.0 / rate)]
