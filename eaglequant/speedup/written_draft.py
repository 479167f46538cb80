"""The decode speed-up a written draft gives its target at each k, in each engine that loads it (``explain
--target-config``, :func:`eaglequant.predicted_speedup`), from the cost model of :mod:`eaglequant.speedup`: the
draft priced as each engine reads it, and the BF16 head it was converted from beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.errors import InputError
from eaglequant.draft.capture_routing import RoutingLocality
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.calibration import timing_for
from eaglequant.speedup.draft_fit import check_draft_fits
from eaglequant.speedup.hardware import DEFAULT_ACCELERATOR, Accelerator
from eaglequant.speedup.locality import check_measured_on, with_measured
from eaglequant.speedup.model import ROUTING_LOCALITY, SpeedupTable, predict_speedup
from eaglequant.speedup.target_step import target_weights


@dataclass(frozen=True)
class Serving:
    """How the target and draft are served, for the speed-up model: the accelerator (a named one, or figures of
    the user's own), the ranks, the concurrencies and how alike a sequence's tokens route."""

    tensor_parallel_size: int = 1
    concurrency: tuple[int, ...] = (1,)
    gpu: str | None = None  # a named accelerator (speedup.hardware); None: an H100 SXM unless figures are given
    bandwidth: float | None = None  # TB/s, the user's own
    peaks: Mapping[str, float] | None = None  # kind -> TFLOPS, the user's own
    routing_locality: float = ROUTING_LOCALITY
    expert_parallel_size: int = 1
    draft_tensor_parallel_size: int | None = None  # None: the target's
    fit_locality: bool = False  # the routing locality fitted to ``measured`` (three k or more)
    fit_concurrency: int | None = None  # the C whose rounds in ``measured`` fit the round's terms (None: the smallest)
    routing_measured: RoutingLocality | None = None  # measured by capture: its estimate is ``routing_locality``

    def accelerator(self) -> Accelerator:
        from eaglequant.speedup.hardware import accelerator, with_figures

        named = accelerator(self.gpu) if self.gpu else None
        if named is None and self.bandwidth is None and not self.peaks:
            return accelerator(DEFAULT_ACCELERATOR)
        return with_figures(named, self.bandwidth, dict(self.peaks or {}))


def predicted_speedup(
    dst: str | Path,
    target: str | Path,
    *,
    acceptance: Mapping[int, float] | None = None,
    acceptance_from: str = "given",
    tensor_parallel_size: int = 1,
    measured: str | Path | None = None,
    engines: list[str] | tuple[str, ...] = (),
    serving: Serving | None = None,
    acceptance_interval: Mapping[int, tuple[float, float]] | None = None,
) -> list[SpeedupTable]:
    """The predicted speed-up of ``dst`` over ``target`` (a checkpoint directory or its ``config.json``) at each k
    ``acceptance`` (k -> acceptance length) gives, in each engine that loads ``dst``, at each concurrency of
    ``serving`` (default: batch 1 on ``tensor_parallel_size`` ranks of an H100 SXM). A quantized ``dst`` is followed by
    the BF16 head it was converted from (the baseline row); a BF16 ``dst`` is priced as it is. ``measured``: an
    ``eaglequant accept`` record whose source-draft rounds calibrate the model's overheads
    (:func:`~eaglequant.speedup.model.calibrate`); without it the stated terms are used, and printed."""
    if not acceptance:
        raise InputError(
            "no acceptance length to predict the speed-up from",
            hint="predict it (verify DST --inputs CAP records it) or give one: --acceptance 2.62@3",
        )
    check_draft_fits(Path(dst), Path(target))
    serving = serving or Serving(tensor_parallel_size)
    weights = target_weights(Path(target), serving.tensor_parallel_size).on(
        serving.tensor_parallel_size, serving.expert_parallel_size
    )
    if serving.routing_measured is not None:
        check_measured_on(serving.routing_measured, weights)
    hardware = serving.accelerator()
    tables = []
    draft_kv = draft_cache_bytes(Path(dst))
    for name, cost, source in _priced_drafts(Path(dst), engines):
        timing = timing_for(weights, source, None if measured is None else Path(measured), hardware=hardware,
                            routing_locality=serving.routing_locality, fit_locality=serving.fit_locality,
                            draft_tensor_parallel_size=serving.draft_tensor_parallel_size,
                            draft_kv_bytes_per_position=draft_kv,
                            fit_concurrency=serving.fit_concurrency)  # fmt: skip
        timing = with_measured(timing, serving.routing_measured)
        for c in serving.concurrency:
            tables.append(
                predict_speedup(
                    name,
                    weights,
                    cost,
                    acceptance,
                    timing,
                    acceptance_from,
                    concurrency=c,
                    acceptance_interval=acceptance_interval,
                    draft_kv_bytes_per_position=draft_kv,
                    draft_tensor_parallel_size=serving.draft_tensor_parallel_size,
                )
            )
    return tables


def draft_cache_bytes(dst: Path) -> float:
    """The draft's own KV cache a context position, all its layers, from its ``config.json`` (its attention's
    shape, as :func:`~eaglequant.speedup.target_step.kv_bytes_per_position` reads a target's)."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.speedup.target_step import kv_bytes_per_position

    return kv_bytes_per_position(load_json_object(dst / "config.json", "config.json"))[0]


def as_trained(dst: Path) -> bool:
    """Whether ``dst`` is a head as trained (BF16, no quantization config): priced as it is, not explained."""
    from eaglequant.checkpoint.reader import load_json_object

    config = load_json_object(dst / "config.json", "config.json") if (dst / "config.json").is_file() else {}
    return "quantization_config" not in config and not (dst / "hf_quant_config.json").is_file()


def _priced_drafts(dst: Path, engines: list[str] | tuple[str, ...]) -> list[tuple[str, RoundCost, RoundCost]]:
    """(name, round cost, its BF16 source's) for each engine that loads ``dst``, then the BF16 source itself as the
    baseline row; for a BF16 ``dst`` (no quantization_config), the head as it is, in each engine."""
    from eaglequant.conversion.inspection import inspect_source
    from eaglequant.conversion.options import ConversionOptions
    from eaglequant.record.as_recorded import explain_written

    if as_trained(dst):
        options = ConversionOptions(engines=tuple(engines) or ("vllm",))
        costs = inspect_source(dst, options, DEFAULT_DRAFT_TOKENS).round_costs
        return [(f"{c.engine_release}, BF16 (as it is)", c.as_source(), c.as_source()) for c in costs]
    found = [
        (reading.titled, reading.round_cost, reading.round_cost.as_source())
        for reading in explain_written(dst, engines, None, None, DEFAULT_DRAFT_TOKENS).engines
        if reading.round_cost is not None
    ]
    baselines = [(f"{name}, the BF16 head it was converted from", source, source) for name, _, source in found]
    return found + baselines


def acceptance_at(text: str, up_to: int = DEFAULT_MAX_DRAFT_TOKENS) -> tuple[dict[int, float], str]:
    """``2.62@3`` (a length at a k) as acceptance at k = 1..``up_to`` (:func:`~.model.geometric_acceptance`), and
    where it came from in words."""
    from eaglequant.speedup.model import geometric_acceptance

    length_text, at, k_text = text.partition("@")
    if not at:
        raise InputError(
            f"acceptance {text!r}: no k: give the k it was measured at, LENGTH@K", hint="e.g. --acceptance 2.62@3"
        )
    try:
        length, k = float(length_text), int(k_text)
    except ValueError:
        raise InputError(f"acceptance {text!r}: not LENGTH@K", hint="e.g. --acceptance 2.62@3") from None
    if k < 1:
        raise InputError(f"acceptance {text!r}: k must be at least 1", hint="e.g. --acceptance 2.62@3")
    said = f"{length:g} at k = {k} (given), carried to other k at a constant per-token rate"
    return geometric_acceptance(length, k, up_to), said
