"""Acceptance runs: the target alone, the source draft and each quantized draft, served by the engine.

Each run is one process of the engine's interpreter (``engine_load/probes/vllm_accept.py``): the engine is
built once per (target, draft) and every prompt is generated on its own in every decoding mode, its counters
read before and after. The target alone gives the greedy reference that speculative decoding must reproduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.engine_failure import EngineFailure
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.measurement.statistics import (
    NEAR_TIE_NATS,
    Acceptance,
    Interval,
    Lossless,
    PromptCounts,
    gate_text,
    lossless,
    paired_difference,
    within_budget,
)

RUN_TIMEOUT_S = 3600
SERVER = "server"  # how a draft on a running server was served: as that server serves it


@dataclass(frozen=True)
class Mode(JsonRecord):
    name: str
    temperature: float
    seed: int = 0


GREEDY = Mode("greedy", 0.0)


def modes_for(temperatures: Sequence[float], seed: int = 0) -> tuple[Mode, ...]:
    """Greedy first (it is what losslessness is checked on), then one sampled mode per temperature > 0."""
    sampled = [Mode(f"T={t:g}", float(t), seed) for t in dict.fromkeys(temperatures) if t > 0]
    return (GREEDY, *sampled)


@dataclass(frozen=True)
class Settings(JsonRecord):
    json_values = named(prompts=len)

    target: Path
    prompts: tuple[str, ...]
    prompts_from: str
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    max_tokens: int = 96
    modes: tuple[Mode, ...] = (GREEDY,)
    dtype: str = "bfloat16"
    seed: int = 0
    engine_args: dict[str, Any] = field(default_factory=dict)  # the user's, over eaglequant's defaults

    def max_model_len(self) -> int:
        """Room for the prompts, the generation and a draft, within the target's own context."""
        from eaglequant.measurement.engine_args import model_length

        return model_length(self.target, self.prompts, self.max_tokens + self.draft_tokens)

    def served_arguments(self) -> dict[str, Any]:
        """The engine arguments every run is served with (offline or a launched server)."""
        from eaglequant.measurement.engine_args import serving_arguments

        return serving_arguments(self.engine_args, dtype=self.dtype, seed=self.seed, max_model_len=self.max_model_len())


class AcceptanceRunError(EngineFailure):
    """The engine could not run speculative decoding at all."""


@dataclass(frozen=True)
class EngineRun:
    """What one engine process measured: per mode, the prompts' counters and tokens."""

    version: str
    speculative_config: dict[str, Any] | None
    seconds: float
    modes: dict[str, tuple[PromptCounts, ...]]

    def acceptance(self, mode: str) -> Acceptance:
        return Acceptance(self.modes[mode])


def run_engine(interpreter: Path, settings: Settings, draft: Path | None, label: str) -> EngineRun:
    """Serve ``settings.target`` with ``draft`` (None: alone) in one process of ``interpreter``."""
    from eaglequant.engine_load import EngineJobError, run_engine_job

    modes = settings.modes if draft is not None else (GREEDY,)
    job = {
        "target": str(settings.target.resolve()),
        "draft": None if draft is None else str(draft.resolve()),
        "draft_tokens": settings.draft_tokens,
        "max_tokens": settings.max_tokens,
        "prompts": list(settings.prompts),
        "modes": [m.to_json() for m in modes],
        "engine_args": settings.served_arguments(),
    }
    ranks = int(settings.served_arguments().get("tensor_parallel_size", 1))
    try:
        data = run_engine_job(interpreter, "vllm_accept", job, RUN_TIMEOUT_S, ranks)
    except EngineJobError as error:
        raise AcceptanceRunError(f"vLLM could not serve {settings.target} with {label}: {error.message}") from None
    return EngineRun(
        str(data["version"]),
        data.get("speculative_config"),
        float(data["seconds"]),
        {m["name"]: tuple(PromptCounts.from_json(p) for p in m["prompts"]) for m in data["modes"]},
    )


@dataclass
class DraftResult:
    """One draft (the source, or a quantized one) as the engine served it."""

    label: str
    path: Path
    served_as: str  # "source", "stored", "dequantized" or "server"
    run: EngineRun
    lossless: Lossless
    dequantized: list[str] = field(default_factory=list)  # linears served dequantized
    scheme: str | None = None
    budget: float | None = None  # tokens of greedy acceptance length the scheme (or the search) allows to lose
    difference: dict[str, Interval] = field(default_factory=dict)  # per mode, against the source draft
    budget_from: str | None = None  # whose budget it is, in words (None: the scheme's)

    @property
    def over_budget(self) -> bool:
        """The one gate (:func:`~eaglequant.measurement.statistics.within_budget`) on the greedy change: the drop's
        95% upper bound past the budget."""
        change = self.reported_difference(GREEDY.name)  # none where the drafts cannot be compared
        return self.budget is not None and change is not None and not within_budget(change, self.budget)

    def reported_difference(self, mode: str) -> Interval | None:
        """The difference from the source draft in ``mode`` as reports give it: None for the source draft, and
        where there is none to report (no drafts to compare)."""
        value = self.difference.get(mode)
        return None if value is None or math.isnan(value.value) else value

    @property
    def problems(self) -> list[Finding]:
        """``not-lossless`` and ``over-budget``, about the draft's label."""
        found = []
        if not self.lossless.ok:
            index, token = self.lossless.first_difference or (0, 0)
            differ = self.lossless.prompts - self.lossless.equal - self.lossless.near_ties
            lossy = (
                f"{self.label}: greedy output differs from the target's alone on {differ}"
                f" of {self.lossless.prompts} prompts where the target's choice was no near-tie (first: prompt "
                f"{index}, token {token}); speculative decoding must be lossless"
            )
            found.append(Finding("not-lossless", self.label, lossy))
        if self.over_budget and self.budget is not None:
            whose = f"the {self.scheme} budget"
            over = (
                f"{self.label}: greedy acceptance length change against the source draft "
                f"{gate_text(self.difference[GREEDY.name], self.budget)} ({self.budget_from or whose})"
            )
            found.append(Finding("over-budget", self.label, over))
        return found

    def to_json(self, modes: Sequence[Mode]) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": str(self.path),
            "served_as": self.served_as,
            "dequantized": self.dequantized,
            "scheme": self.scheme,
            "budget": self.budget,
            "lossless": self.lossless.to_json(),
            "modes": {
                m.name: {**self.run.acceptance(m.name).to_json(), "difference": _json(self.reported_difference(m.name))}
                for m in modes
            },
            "seconds": self.run.seconds,
            "problems": self.problems,
        }


def _json(value: Interval | None) -> dict[str, float | None] | None:
    return None if value is None else value.to_json()


@dataclass
class AcceptanceReport(JsonRecord):
    json_values = named(source="_served", quantized="_each_served")
    json_computed = ("ok", "problems")

    engine: str
    version: str
    speculative_config: dict[str, Any] | None
    settings: Settings
    source: DraftResult
    quantized: list[DraftResult]
    notes: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [p for draft in (self.source, *self.quantized) for p in draft.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def _served(self, draft: DraftResult) -> dict[str, Any]:
        """A draft's figures in the modes it was served in (the settings')."""
        return draft.to_json(self.settings.modes)

    def _each_served(self, drafts: list[DraftResult]) -> list[dict[str, Any]]:
        return [self._served(draft) for draft in drafts]


@dataclass(frozen=True)
class QuantizedDraft:
    """A quantized draft to measure: where it is, what the engine is given, and the scheme's budget."""

    path: Path
    served: Path
    served_as: str
    dequantized: list[str]
    scheme: str | None
    budget: float | None
    budget_from: str | None = None  # whose budget it is, in words (None: the scheme's)


def served_digest(directory: Path) -> str:
    """One SHA-256 over the files the engine reads of a draft directory (weights and config)."""
    import hashlib

    from eaglequant.checkpoint.hashing import file_sha256

    read = ("config.json", "generation_config.json", "hf_quant_config.json")
    files = sorted(p for p in directory.iterdir() if p.suffix in (".safetensors", ".bin") or p.name in read)
    return hashlib.sha256("".join(f"{p.name}:{file_sha256(p)}" for p in files).encode()).hexdigest()


# Serves the target with a draft and measures it: (the run's place: 0 the target alone, 1 the source draft, then
# each quantized draft in order; the draft, None alone; its label) -> the run.
Runner = Callable[[int, Path | None, str], EngineRun]


def offline_runner(interpreter: Path, settings: Settings) -> Runner:
    """One process of the engine's interpreter per run (``LLM(...)``, the ``vllm_accept`` probe)."""
    return lambda _place, draft, label: run_engine(interpreter, settings, draft, label)


def measure(
    settings: Settings,
    source: Path,
    drafts: Sequence[QuantizedDraft],
    run: Runner,
    progress: Callable[[str], None] = lambda _: None,
    measure_same_bytes_once: bool = True,
    run_skipped: Callable[[], None] = lambda: None,
) -> AcceptanceReport:
    """The target alone (the greedy reference), the source draft, then each quantized draft, each served by
    ``run``; each draft's difference from the source, paired by prompt (``run_skipped`` is told of a draft whose
    bytes were measured already)."""
    if not drafts:
        raise InputError("no quantized draft to measure", hint="give at least one DST")
    progress("the target alone (the greedy reference)")
    alone = run(0, None, "no draft").modes[GREEDY.name]
    tolerance = NEAR_TIE_NATS.get(settings.dtype, 0.0)
    progress(f"the source draft {source}")
    source_run = run(1, source, f"draft {source}")
    source_result = DraftResult(
        "source", source, "source", source_run, lossless(source_run.modes[GREEDY.name], alone, tolerance)
    )
    results = []
    served: dict[str, tuple[EngineRun, Path]] = {}  # the served files' digest -> the run that served them
    if measure_same_bytes_once:
        served[served_digest(source)] = (source_run, source)
    for place, draft in enumerate(drafts, start=2):
        digest = served_digest(draft.served) if measure_same_bytes_once else str(len(served))
        if digest in served:
            engine_run, first = served[digest]
            progress(f"{draft.path}: serves the same bytes as {first}, measured once")
            run_skipped()
        else:
            progress(f"{draft.path} ({draft.served_as})")
            engine_run = run(place, draft.served, f"draft {draft.path}")
            served[digest] = (engine_run, draft.path)
        result = DraftResult(
            str(draft.path),
            draft.path,
            draft.served_as,
            engine_run,
            lossless(engine_run.modes[GREEDY.name], alone, tolerance),
            draft.dequantized,
            draft.scheme,
            draft.budget,
            budget_from=draft.budget_from,
        )
        result.difference = {
            m.name: paired_difference(engine_run.acceptance(m.name), source_run.acceptance(m.name))
            for m in settings.modes
        }
        results.append(result)
    return AcceptanceReport("vllm", source_run.version, source_run.speculative_config, settings, source_result, results)
