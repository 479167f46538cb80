"""The speed-up at concurrency, calibrated at one C and checked at the others (``scripts/speedup_concurrency.py``):
from ``accept --concurrency`` records of the bundled pair (the source draft and its FP8 conversion), repeated, the
medians over processes of the target alone's seconds a step at each C and of each draft's seconds a token at each
k and C. The target forward's terms are fitted to the target alone at every C
(:func:`~eaglequant.speedup.model.calibrate_target_steps`), the round's to the source draft at one C
(:func:`~eaglequant.speedup.calibration.fitted_at_concurrency`); every other (draft, k, C) is then predicted, each
draft from its acceptance length at the C fitted at (acceptance is the same at every C, the model says), and set
beside the speed-up its medians give.

The CPU is the accelerator here: its bandwidth and bf16 peak are stated (:data:`CPU_BANDWIDTH_TBS`,
:data:`CPU_PEAK_TFLOPS`) or measured once (:func:`measured_cpu`); on the bundled 4-layer target a step's roofline is
a small share of its time, and the fitted overheads absorb what it misses.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.readback.cost import RoundCost
from eaglequant.speedup.hardware import Accelerator, with_figures
from eaglequant.speedup.model import Timing, predict_speedup, stated_timing
from eaglequant.speedup.target_step import TargetWeights

# Stated figures of the CPU priced (two cores of an AMD EPYC, shared): what a core pair streams from memory and its
# bf16 GEMMs (no AMX: fp32 FMA units), both rough; the fit absorbs what they miss, and the table prints them.
CPU_BANDWIDTH_TBS = 0.02
CPU_PEAK_TFLOPS = 0.1
WITHIN = 0.15  # the model's stated error (MODEL_ERROR): a prediction within it of the measured speed-up holds


def cpu_accelerator(bandwidth_tbs: float = CPU_BANDWIDTH_TBS, peak_tflops: float = CPU_PEAK_TFLOPS) -> Accelerator:
    """The CPU as the accelerator the model prices, with its own figures (bandwidth TB/s, bf16 peak TFLOPS)."""
    return with_figures(None, bandwidth_tbs, {"bf16": peak_tflops})


def measured_cpu(megabytes: int = 256, size: int = 1024) -> tuple[float, float]:
    """This CPU's bandwidth (TB/s: a tensor of ``megabytes`` copied, read and written, best of 5) and bf16 peak
    (TFLOPS: a ``size`` square matmul, best of 5), measured once in torch: a STREAM-like copy, not STREAM."""
    import torch

    source = torch.empty(megabytes * 2**20, dtype=torch.uint8)
    target = torch.empty_like(source)
    a = torch.randn(size, size, dtype=torch.bfloat16)
    copies, matmuls = [], []
    for _ in range(5):
        started = time.perf_counter()
        target.copy_(source)
        copies.append(time.perf_counter() - started)
        started = time.perf_counter()
        torch.mm(a, a)
        matmuls.append(time.perf_counter() - started)
    return 2 * source.numel() / min(copies) / 1e12, 2 * size**3 / min(matmuls) / 1e12


@dataclass(frozen=True)
class MedianRound:
    """A draft at one k and C as the medians over processes give it (what the fit reads): seconds a token of one
    sequence, alone and drafted."""

    draft_tokens: int
    acceptance_length: float
    alone_seconds_per_token: float
    drafted_seconds_per_token: float


@dataclass(frozen=True)
class Medians:
    """The medians over calls: the target alone's seconds a step at each C, each (draft, k, C)'s round, and each
    call's own speed-up there."""

    steps: dict[int, float]
    rounds: dict[tuple[str, int, int], MedianRound]
    each: dict[tuple[str, int, int], list[float]]
    alone_rates: dict[int, list[float]]  # C -> each call's target-alone output tokens per second


def medians(reports: Sequence[dict[str, Any]], labels: Mapping[str, str]) -> Medians:
    """The medians of ``reports`` (``accept --concurrency`` JSON), each draft named by ``labels`` (its label in the
    record -> its name here)."""
    from eaglequant.measurement.speed import alone_steps_by_concurrency, measured_speeds

    steps: dict[int, list[float]] = {}
    found: dict[tuple[str, int, int], list[Any]] = {}
    for report in reports:
        for c, seconds in alone_steps_by_concurrency(report).items():
            steps.setdefault(c, []).append(seconds)
            for m in measured_speeds(report, concurrency=c):
                found.setdefault((labels.get(m.label, m.label), m.draft_tokens, c), []).append(m)
    step = {c: statistics.median(s) for c, s in sorted(steps.items())}
    rounds = {
        key: MedianRound(
            key[1],
            statistics.median(m.acceptance_length for m in ms),
            step[key[2]],
            statistics.median(m.drafted_seconds_per_token for m in ms),
        )
        for key, ms in found.items()
    }
    each = {key: [m.speedup.value for m in ms] for key, ms in found.items()}
    return Medians(step, rounds, each, {c: [c / s for s in ss] for c, ss in sorted(steps.items())})


@dataclass(frozen=True)
class ConcurrencyRow(JsonRecord):
    """One draft at one k and C: the acceptance the prediction used (its length at the C fitted at) and the one
    measured at C, the speed-up predicted and the one the medians give, each call's, and whether it was fitted."""

    json_values = named(acceptance_used=rounded(4), acceptance_measured=rounded(4), predicted=rounded(4),
                        measured=rounded(4))  # fmt: skip
    json_computed = ("error", "within")

    draft: str
    draft_tokens: int
    concurrency: int
    acceptance_used: float
    acceptance_measured: float
    predicted: float
    measured: float
    each_call: tuple[float, ...]
    fitted: bool  # the source draft at the C the round's terms were fitted at: a residual, not a prediction

    @property
    def error(self) -> float:
        """Predicted over measured, less 1 (+0.05: 5% high)."""
        return round(self.predicted / self.measured - 1.0, 4)

    @property
    def within(self) -> bool:
        return abs(self.error) <= WITHIN


def fit_and_predict(
    found: Medians,
    target: TargetWeights,
    drafts: Mapping[str, RoundCost],
    fit_at: int,
    hardware: Accelerator,
    context: int = 2048,
) -> tuple[Timing, list[ConcurrencyRow]]:
    """The terms fitted (the target's to every C, the round's to the source draft at ``fit_at``) and every (draft,
    k, C) the medians hold predicted from them; ``drafts`` names each draft's round cost, ``source`` among them;
    ``context``: the tokens of cache each sequence is priced as reading."""
    from eaglequant.speedup.calibration import fitted_at_concurrency

    ks = sorted({k for name, k, c in found.rounds if name == "source" and c == fit_at})
    rounds = [found.rounds[("source", k, fit_at)] for k in ks]
    what = "the medians over processes"
    timing = fitted_at_concurrency(target, drafts["source"], found.steps, rounds,
                                   stated_timing(target, context=context, hardware=hardware), what, fit_at)  # fmt: skip
    rows = []
    for (name, k, c), measured in sorted(found.rounds.items()):
        at_fit = found.rounds.get((name, k, fit_at))
        if at_fit is None:
            continue  # no acceptance at the C fitted at to predict from
        table = predict_speedup(name, target, drafts[name], {k: at_fit.acceptance_length}, timing, concurrency=c)
        rows.append(
            ConcurrencyRow(
                name, k, c, at_fit.acceptance_length, measured.acceptance_length, table.points[0].speedup,
                measured.alone_seconds_per_token / measured.drafted_seconds_per_token,
                tuple(found.each[(name, k, c)]), name == "source" and c == fit_at,
            )
        )  # fmt: skip
    return timing, rows


def markdown(timing: Timing, rows: Sequence[ConcurrencyRow], found: Medians, fit_at: int) -> str:
    """The table (predicted vs measured at each C), the target alone's rates, the fitted terms and their residuals."""
    lines = [
        "| draft | k | C | acceptance used | measured at C | speed-up predicted | measured (medians) | each call's "
        f"| error | within {WITHIN:.0%} |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        each = ", ".join(f"{s:.2f}" for s in r.each_call)
        mark = " (fitted here)" if r.fitted else ""
        lines.append(
            f"| {r.draft} | {r.draft_tokens} | {r.concurrency}{mark} | {r.acceptance_used:.3f} "
            f"| {r.acceptance_measured:.3f} | {r.predicted:.3f}× | {r.measured:.3f}× | {each} | {r.error:+.1%} "
            f"| {'yes' if r.within else 'no'} |"
        )
    predicted = [r for r in rows if not r.fitted]
    worst = max((abs(r.error) for r in predicted), default=float("nan"))
    held = sum(r.within for r in predicted)
    rates = "; ".join(
        f"C = {c}: {', '.join(f'{rate:.0f}' for rate in rs)} tok/s" for c, rs in found.alone_rates.items()
    )
    lines += [
        "",
        f"Away from the C fitted at ({fit_at}): {held} of {len(predicted)} within {WITHIN:.0%}, the largest error "
        f"{worst:.1%}. The target alone's output rate each call: {rates}.",
        "",
        *(f"- {line}" for line in timing.assumptions()),
    ]
    return "\n".join(lines)
