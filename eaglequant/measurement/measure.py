"""Acceptance runs: the target alone, the source draft and each quantized draft, served by the engine.

Each run is one process of the engine's interpreter (``engine_load/probes/vllm_accept.py``): the engine is
built once per (target, draft, k) and every prompt is generated on its own in every decoding mode, its counters
read before and after and its decode timed (and, asked, a pass of the prompts at each concurrency; and, asked,
each draft served once more with a k for each batch size, vLLM's ``num_speculative_tokens_per_batch_size``). The
target alone, served before the drafts and again after them, gives the greedy reference that speculative decoding
must reproduce at every k, and the decode throughput each draft's speed-up is over; where its rate moved between its
runs, or a speed-up breaks a physical limit, no speed-up is reported (:mod:`~eaglequant.measurement.limits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import (
    DEFAULT_DRAFT_TOKENS,
    Schedule,
    judged_at_text,
    judged_draft_tokens,
    schedule_text,
)
from eaglequant.common.engine_failure import EngineFailure
from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE, InputError
from eaglequant.common.findings import Finding
from eaglequant.measurement.concurrency import ConcurrentPass, concurrent_speedup, merged
from eaglequant.measurement.limits import SPEED_CODES, acceptance_problems, drift, drift_problem, speedup_problems
from eaglequant.measurement.record import (
    AcceptanceRecord,
    AloneAtRecord,
    AloneRecord,
    AtConcurrencyRecord,
    AtDraftTokensRecord,
    DraftRecord,
    IntervalRecord,
    LosslessRecord,
    Mode,
    ModeRecord,
    SettingsRecord,
    interval_record,
)
from eaglequant.measurement.statistics import (
    NEAR_TIE_NATS,
    Acceptance,
    BudgetVerdict,
    Interval,
    Lossless,
    PromptCounts,
    budget_verdict,
    decode_rate,
    lossless,
    paired_difference,
    speedup,
)

RUN_TIMEOUT_S = 3600
SERVER = "server"  # how a draft on a running server was served: as that server serves it


GREEDY = Mode("greedy", 0.0)


def modes_for(temperatures: Sequence[float], seed: int = 0) -> tuple[Mode, ...]:
    """Greedy first (it is what losslessness is checked on), then one sampled mode per temperature > 0."""
    sampled = [Mode(f"T={t:g}", float(t), seed) for t in dict.fromkeys(temperatures) if t > 0]
    return (GREEDY, *sampled)


@dataclass(frozen=True)
class Settings:
    """What every run is served with. ``draft_tokens`` is the primary k, the one the gate judges; each draft is
    also measured at every k of ``more_draft_tokens`` (one engine per (draft, k): vLLM fixes k when it builds).
    Records hold its :meth:`record`."""

    target: Path
    prompts: tuple[str, ...]
    prompts_from: str
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    max_tokens: int = 96
    modes: tuple[Mode, ...] = (GREEDY,)
    dtype: str = "bfloat16"
    seed: int = 0
    engine_args: dict[str, Any] = field(default_factory=dict)  # the user's, over eaglequant's defaults
    more_draft_tokens: tuple[int, ...] = ()
    target_alone_runs: int = 2  # before the drafts, then after them (its drift between processes checked)
    concurrency: tuple[int, ...] = ()  # each C: a greedy pass with at most C requests in flight, in every run
    # vLLM's num_speculative_tokens_per_batch_size: each draft served once more with a k for each batch size
    schedule: Schedule = ()

    @property
    def each_draft_tokens(self) -> tuple[int, ...]:
        """Every k measured, the primary first."""
        return (self.draft_tokens, *self.more_draft_tokens)

    @property
    def runs_a_draft(self) -> int:
        """The runs each draft is served in: one a k, and one for the schedule."""
        return len(self.each_draft_tokens) + bool(self.schedule)

    def record(self) -> SettingsRecord:
        """What records hold of it: the prompts as their count."""
        return SettingsRecord(
            *(str(self.target), len(self.prompts), self.prompts_from, self.draft_tokens, self.max_tokens, self.modes),
            *(self.dtype, self.seed, self.engine_args, self.more_draft_tokens, self.target_alone_runs),
            self.concurrency,
            self.schedule,
        )

    def at(self, draft_tokens: int) -> Settings:
        """These settings for one run at ``draft_tokens``."""
        return replace(self, draft_tokens=draft_tokens, more_draft_tokens=(), schedule=())

    def scheduled(self) -> Settings:
        """These settings for the run that serves the schedule: k its largest (vLLM's ``num_speculative_tokens``,
        which caps every k of the schedule)."""
        return replace(self, draft_tokens=max(k for *_, k in self.schedule), more_draft_tokens=())

    def served_at(self) -> str:
        """What a run with these settings drafts, in words: ``k = 3``, or ``the schedule 1-2:3,3-8:1``."""
        return served_words(self.draft_tokens, self.schedule)

    def max_model_len(self) -> int:
        """Room for the prompts, the generation and a draft, within the target's own context."""
        from eaglequant.measurement.engine_args import model_length

        return model_length(self.target, self.prompts, self.max_tokens + self.draft_tokens)

    def served_arguments(self) -> dict[str, Any]:
        """The engine arguments every run is served with (offline or a launched server)."""
        from eaglequant.measurement.engine_args import serving_arguments

        # with C requests in flight the engine must batch C (the user's own max_num_seqs stands)
        batched = {"max_num_seqs": max(self.concurrency)} if self.concurrency else {}
        return serving_arguments(
            {**batched, **self.engine_args}, dtype=self.dtype, seed=self.seed, max_model_len=self.max_model_len()
        )


def served_words(draft_tokens: int, schedule: Schedule) -> str:
    """``k = 3``, or under a schedule ``the schedule 1-2:3,3-8:1``."""
    return f"the schedule {schedule_text(schedule)}" if schedule else f"k = {draft_tokens}"


class AcceptanceRunError(EngineFailure):
    """The engine could not run speculative decoding at all."""


@dataclass(frozen=True)
class EngineRun:
    """What one engine process measured: per mode, the prompts' counters, tokens and decode times, and the clock
    that timed the greedy mode's decode ("engine": the engine's own timestamps or histograms; "wall": the
    client's wall time around each request; None: not timed)."""

    version: str
    speculative_config: dict[str, Any] | None
    seconds: float
    modes: dict[str, tuple[PromptCounts, ...]]
    clock: str | None = None
    concurrent: tuple[ConcurrentPass, ...] = ()  # greedy passes with at most C requests in flight, per C asked

    def acceptance(self, mode: str) -> Acceptance:
        return Acceptance(self.modes[mode])

    def decode_tokens_per_second(self, mode: str = GREEDY.name) -> float | None:
        """Decode throughput in ``mode`` over the prompts (None: not timed)."""
        return decode_rate(self.modes[mode])


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
        "concurrency": list(settings.concurrency),
        "schedule": [list(entry) for entry in settings.schedule],
    }
    ranks = int(settings.served_arguments().get("tensor_parallel_size", 1))
    try:
        data = run_engine_job(interpreter, "vllm_accept", job, RUN_TIMEOUT_S, ranks)
    except EngineJobError as error:
        raise AcceptanceRunError(f"vLLM could not serve {settings.target} with {label}: {error.message}") from None
    resolved = data.get("speculative_config") or {}
    if draft is not None and settings.schedule and not resolved.get("num_speculative_tokens_per_batch_size"):
        raise AcceptanceRunError(
            f"vLLM {data['version']} did not serve {settings.served_at()} with {label}: its speculative config "
            f"resolved without num_speculative_tokens_per_batch_size ({resolved})"
        )
    clocks = {m["name"]: m.get("clock") for m in data["modes"]}
    return EngineRun(
        str(data["version"]),
        data.get("speculative_config"),
        float(data["seconds"]),
        {m["name"]: tuple(PromptCounts.from_json(p) for p in m["prompts"]) for m in data["modes"]},
        clocks.get(GREEDY.name),
        tuple(ConcurrentPass.from_json(p) for p in data.get("concurrent", ())),
    )


def _four_decimals(rate: float | None) -> float | None:
    """A rate or a drift as records hold it: to 4 decimals."""
    return None if rate is None else round(rate, 4)


@dataclass(frozen=True)
class AtConcurrency:
    """One draft at one k with at most C requests in flight: its pass, its speed-up over the target alone's at the
    same C, and what of it breaks a physical limit (:mod:`~eaglequant.measurement.limits`)."""

    concurrency: int
    drafted: ConcurrentPass
    speedup: Interval
    problems: tuple[Finding, ...] = ()
    drifted: bool = False  # the target alone's rate at this C moved between its runs past the limit

    @property
    def speed_problems(self) -> list[str]:
        return [p.code for p in self.problems] + ["target-alone-drifted"] * self.drifted

    @property
    def reported_speedup(self) -> Interval | None:
        return None if self.speed_problems else self.speedup

    def record(self) -> AtConcurrencyRecord:
        return AtConcurrencyRecord(
            concurrency=self.concurrency,
            output_tokens_per_second=IntervalRecord.of(self.drafted.output_tokens_per_second()),
            acceptance_length=self.drafted.acceptance_length(),
            speedup=interval_record(self.reported_speedup),
            measured_speedup=IntervalRecord.of(self.speedup),
            speed_problems=tuple(self.speed_problems),
        )


@dataclass(frozen=True)
class AtDraftTokens:
    """One draft served at one k: its run, its greedy output against the target alone's, its greedy change
    against the source draft at the same k (None for the source itself, or none to report) and its decode
    speed-up over the target alone (greedy, paired by prompt)."""

    draft_tokens: int
    run: EngineRun
    lossless: Lossless
    difference: Interval | None
    speedup: Interval
    # why the speed-up is no result (:mod:`~eaglequant.measurement.limits`), and acceptance out of its range
    problems: tuple[Finding, ...] = ()

    drifted: bool = False  # the target alone's rate moved between its runs past the limit: no speed-up reported
    at_concurrency: tuple[AtConcurrency, ...] = ()  # each C asked, in order
    schedule: Schedule = ()  # served with a k for each batch size (``draft_tokens`` its largest), else one k

    @property
    def speed_problems(self) -> list[str]:
        """The codes of what refused the speed-up (none: it is a result)."""
        codes = [p.code for p in self.problems if p.code in SPEED_CODES]
        return codes + ["target-alone-drifted"] * self.drifted

    @property
    def reported_speedup(self) -> Interval | None:
        """The speed-up as reports give it: None where a limit refused it."""
        return None if self.speed_problems else self.speedup

    def record(self) -> AtDraftTokensRecord:
        """What records hold of it (under a schedule, the schedule too)."""
        return AtDraftTokensRecord(
            schedule=self.schedule,
            draft_tokens=self.draft_tokens,
            acceptance_length=IntervalRecord.of(self.run.acceptance(GREEDY.name).length()),
            decode_tokens_per_second=_four_decimals(self.run.decode_tokens_per_second()),
            clock=self.run.clock,
            speedup=interval_record(self.reported_speedup),
            measured_speedup=IntervalRecord.of(self.speedup),
            speed_problems=tuple(self.speed_problems),
            difference=interval_record(self.difference),
            lossless=lossless_record(self.lossless),
            by_concurrency=tuple(at.record() for at in self.at_concurrency),
        )


def lossy_text(label: str, found: Lossless) -> str:
    """Why ``label``'s greedy output is not the target's alone, in words."""
    index, token = found.first_difference or (0, 0)
    differ = found.prompts - found.equal - found.near_ties
    return (
        f"{label}: greedy output differs from the target's alone on {differ}"
        f" of {found.prompts} prompts where the target's choice was no near-tie (first: prompt "
        f"{index}, token {token}); speculative decoding must be lossless"
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
    by_draft_tokens: list[AtDraftTokens] = field(default_factory=list)  # every k measured, the primary first
    served_draft_tokens: int = DEFAULT_DRAFT_TOKENS  # the k the draft is served at (its search's, else the default)
    scheduled: AtDraftTokens | None = None  # served with the settings' schedule (None: none asked)

    @property
    def judged_draft_tokens(self) -> int:
        """The k the budget is judged at: the one the draft is served at where it was measured, else the first."""
        measured = [at.draft_tokens for at in self.by_draft_tokens]
        return judged_draft_tokens(measured, self.served_draft_tokens) if measured else self.served_draft_tokens

    def _judged_change(self) -> tuple[Interval | None, int]:
        """The greedy change against the source draft at the judged k, and the paired prompts it is over."""
        k = self.judged_draft_tokens
        at = next((a for a in self.by_draft_tokens[1:] if a.draft_tokens == k), None)
        if at is None:  # the primary k (or none listed): the change of every mode is there
            return self.reported_difference(GREEDY.name), len(self.run.modes[GREEDY.name])
        return at.difference, len(at.run.modes[GREEDY.name])

    @property
    def verdict(self) -> BudgetVerdict | None:
        """The one gate (:func:`~eaglequant.measurement.statistics.budget_verdict`) on the greedy change at the
        judged k: within, past or inconclusive; None without a budget or a change (no drafts to compare)."""
        change, prompts = self._judged_change()
        return None if self.budget is None or change is None else budget_verdict(change, self.budget, prompts)

    @property
    def over_budget(self) -> bool:
        """The whole interval of the greedy change past the budget."""
        return self.verdict is not None and self.verdict.past

    @property
    def inconclusive(self) -> bool:
        """The greedy change's interval straddles the budget: more prompts would tell."""
        return self.verdict is not None and self.verdict.inconclusive

    def verdict_text(self) -> str | None:
        """The verdict in words, whose budget, and the k it was judged at."""
        verdict = self.verdict
        if verdict is None or self.budget is None:
            return None
        whose = self.budget_from or f"the {self.scheme} budget"
        judged = judged_at_text(self.judged_draft_tokens, self.served_draft_tokens)
        return f"{verdict.text()} ({whose}); {judged}"

    def reported_difference(self, mode: str) -> Interval | None:
        """The difference from the source draft in ``mode`` as reports give it: None for the source draft, and
        where there is none to report (no drafts to compare)."""
        value = self.difference.get(mode)
        return None if value is None or math.isnan(value.value) else value

    @property
    def problems(self) -> list[Finding]:
        """``not-lossless``, and ``over-budget`` or ``acceptance-inconclusive`` (at the judged k), about the draft's
        label."""
        found = []
        if not self.lossless.ok:
            found.append(Finding("not-lossless", self.label, lossy_text(self.label, self.lossless)))
        served = [*self.by_draft_tokens, *([self.scheduled] if self.scheduled else [])]
        for other in served[1:]:  # lossless at every k and the schedule; the budget is judged at the primary k
            if not other.lossless.ok:
                at = f"{self.label} at {served_words(other.draft_tokens, other.schedule)}"
                found.append(Finding("not-lossless", self.label, lossy_text(at, other.lossless)))
        found += [problem for at in served for problem in at.problems]
        found += [problem for at in served for c in at.at_concurrency for problem in c.problems]
        verdict = self.verdict_text()
        if verdict is not None and (self.over_budget or self.inconclusive):
            code = "over-budget" if self.over_budget else "acceptance-inconclusive"
            change = f"{self.label}: greedy acceptance length change against the source draft {verdict}"
            found.append(Finding(code, self.label, change))
        return found

    def record(self, modes: Sequence[Mode]) -> DraftRecord:
        """What records hold of it, in the modes it was served in (the settings')."""
        verdict = self.verdict
        return DraftRecord(
            label=self.label,
            path=str(self.path),
            served_as=self.served_as,
            dequantized=tuple(self.dequantized),
            scheme=self.scheme,
            budget=self.budget,
            served_draft_tokens=self.served_draft_tokens,
            judged_draft_tokens=self.judged_draft_tokens if self.budget is not None else None,
            budget_verdict=None if verdict is None else verdict.outcome,
            lossless=lossless_record(self.lossless),
            modes={m.name: self._mode_record(m.name) for m in modes},
            by_draft_tokens=tuple(at.record() for at in self.by_draft_tokens),
            scheduled=None if self.scheduled is None else self.scheduled.record(),
            seconds=self.run.seconds,
            problems=tuple(self.problems),
        )

    def _mode_record(self, mode: str) -> ModeRecord:
        figures = self.run.acceptance(mode).figures()
        return ModeRecord(
            prompts=figures.prompts,
            drafts=figures.drafts,
            accepted=figures.accepted,
            acceptance_length=IntervalRecord.of(figures.acceptance_length),
            per_position=tuple(IntervalRecord.of(share) for share in figures.per_position),
            difference=interval_record(self.reported_difference(mode)),
            decode_tokens_per_second=_four_decimals(self.run.decode_tokens_per_second(mode)),
        )


def lossless_record(found: Lossless) -> LosslessRecord:
    return LosslessRecord(found.equal, found.prompts, found.near_ties, found.first_difference, found.tolerance)


@dataclass
class AcceptanceReport:
    """The target alone (``alone``, its decode throughput the speed-ups are over), the source draft and each
    quantized draft, at every k measured; ``device`` is "cpu" where the engine's CPU build ran them (None: not
    known, as on running servers). What ``accept`` writes is its :meth:`record`."""

    engine: str
    version: str
    speculative_config: dict[str, Any] | None
    settings: Settings
    source: DraftResult
    quantized: list[DraftResult]
    notes: list[Finding] = field(default_factory=list)
    alone: EngineRun | None = None
    device: str | None = None
    alone_again: list[EngineRun] = field(default_factory=list)  # the target alone's later runs (after the drafts)
    drift: list[Finding] = field(default_factory=list)  # ``target-alone-drifted``: sequential, then at each C

    @property
    def engine_build(self) -> str:
        """The engine release that measured, and its CPU build where that ran it: the figures' context,
        speeds most of all (``vLLM 0.32.0 CPU build``)."""
        from eaglequant.engines import engine_title

        title = engine_title(self.engine, self.version)
        return f"{title} CPU build" if self.device == "cpu" else title

    def record(self) -> AcceptanceRecord:
        """What ``accept`` writes: the settings' record, each draft's in the modes it was served in, the target
        alone's over all its runs, and the problems (its drift's and each draft's)."""
        modes = self.settings.modes
        return AcceptanceRecord(
            engine=self.engine,
            version=self.version,
            speculative_config=self.speculative_config,
            settings=self.settings.record(),
            source=self.source.record(modes),
            quantized=tuple(draft.record(modes) for draft in self.quantized),
            notes=tuple(self.notes),
            target_alone=None if self.alone is None else alone_record([self.alone, *self.alone_again]),
            device=self.device,
            engine_build=self.engine_build,
            problems=tuple(self.problems),
        )

    def for_draft(self, label: str) -> AcceptanceReport:
        """The report narrowed to the quantized draft ``label`` (its ok and problems then the source's, the target
        alone's and this draft's): what its destination records."""
        return replace(self, quantized=[d for d in self.quantized if d.label == label])

    @property
    def problems(self) -> list[Finding]:
        return [*self.drift, *(p for draft in (self.source, *self.quantized) for p in draft.problems)]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        """0 with no problem; 7 (inconclusive) where every problem is a change straddling its budget; else 3."""
        codes = {p.code for p in self.problems}
        if not codes:
            return 0
        return EXIT_INCONCLUSIVE if codes == {"acceptance-inconclusive"} else EXIT_CHECK_FAILED


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
    served_draft_tokens: int = DEFAULT_DRAFT_TOKENS  # the k it is served at: its search's choice, else the default


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
    runner_at: Callable[[Settings], Runner],
    progress: Callable[[str], None] = lambda _: None,
    measure_same_bytes_once: bool = True,
    run_skipped: Callable[[], None] = lambda: None,
) -> AcceptanceReport:
    """The target alone (the greedy reference and the decode throughput speed-ups are over); then at each k of
    ``settings`` the source draft and each quantized draft, each served by the runner ``runner_at`` gives for the
    settings at that k; then the target alone again, ``settings.target_alone_runs`` in all, its drift between
    them judged (:mod:`~eaglequant.measurement.limits`); each draft's difference from the source at the same k,
    paired by prompt (``run_skipped`` is told of a draft whose bytes were measured already at that k)."""
    if not drafts:
        raise InputError("no quantized draft to measure", hint="give at least one DST")
    progress("the target alone (the greedy reference)")
    alone = runner_at(settings.at(settings.draft_tokens))(0, None, "no draft")
    several = settings.runs_a_draft > 1
    served = [settings.at(k) for k in settings.each_draft_tokens]
    served += [settings.scheduled()] if settings.schedule else []
    runs_by_k = [
        (at, _runs_at(at, source, drafts, runner_at, progress, measure_same_bytes_once, run_skipped,
                      f", {at.served_at()}" if several else ""))
        for at in served
    ]  # fmt: skip
    again = []
    for repeat in range(2, settings.target_alone_runs + 1):
        progress(f"the target alone again, run {repeat} (its drift between processes)")
        again.append(runner_at(settings.at(settings.draft_tokens))(0, None, f"no draft, run {repeat}"))
    timed_alone = EngineRun(
        alone.version, None, alone.seconds, {GREEDY.name: merged_prompts([alone, *again])},
        concurrent=tuple(merged(passes) for passes in zip(*(r.concurrent for r in (alone, *again)), strict=True)),
    )  # fmt: skip
    each = [
        [_at(at, runs[place], runs[0], (alone, timed_alone), place, drafts) for at, runs in runs_by_k]
        for place in range(1 + len(drafts))
    ]
    each, moved = _judged_drift(each, [alone, *again], str(settings.target))
    fixed = len(settings.each_draft_tokens)  # then the schedule's run, where asked
    source_at = each[0]
    source_result = DraftResult(
        "source", source, "source", source_at[0].run, source_at[0].lossless, by_draft_tokens=source_at[:fixed],
        scheduled=next(iter(source_at[fixed:]), None),
    )  # fmt: skip
    results = []
    for draft, at in zip(drafts, each[1:], strict=True):
        result = DraftResult(
            str(draft.path), draft.path, draft.served_as, at[0].run, at[0].lossless, draft.dequantized,
            draft.scheme, draft.budget, budget_from=draft.budget_from, by_draft_tokens=at[:fixed],
            served_draft_tokens=draft.served_draft_tokens, scheduled=next(iter(at[fixed:]), None),
        )  # fmt: skip
        result.difference = {
            m.name: paired_difference(at[0].run.acceptance(m.name), source_result.run.acceptance(m.name))
            for m in settings.modes
        }
        results.append(result)
    source_run = source_result.run
    return AcceptanceReport(
        "vllm", source_run.version, source_run.speculative_config, settings, source_result, results, alone=alone,
        alone_again=again, drift=moved,
    )  # fmt: skip


def alone_record(runs: Sequence[EngineRun]) -> AloneRecord:
    """The target alone's decode throughput over all its ``runs``, the clock that timed it, each run's own rate
    (before the drafts, then after them) and how far they moved apart; and the same at each C."""
    rates = [run.decode_tokens_per_second() for run in runs]
    return AloneRecord(
        decode_tokens_per_second=_four_decimals(decode_rate(merged_prompts(runs))),
        clock=runs[0].clock,
        runs=tuple(_four_decimals(rate) for rate in rates),
        drift=_four_decimals(drift(rates)),
        by_concurrency=tuple(_alone_at(passes) for passes in zip(*(run.concurrent for run in runs), strict=True)),
    )


def _alone_at(passes: Sequence[ConcurrentPass]) -> AloneAtRecord:
    """The target alone at one C: its output tokens per second over its runs, each run's, and their drift."""
    rates = [p.output_tokens_per_second().value for p in passes]
    return AloneAtRecord(
        concurrency=passes[0].concurrency,
        output_tokens_per_second=IntervalRecord.of(merged(passes).output_tokens_per_second()),
        runs=tuple(_four_decimals(rate) for rate in rates),
        drift=_four_decimals(drift(rates)),
    )


def merged_prompts(runs: Sequence[EngineRun]) -> tuple[PromptCounts, ...]:
    """The target alone's greedy prompts over all its runs, each prompt's decode tokens and seconds summed (its
    first run's tokens: the greedy reference); untimed where any run left the prompt untimed."""
    summed = []
    for prompts in zip(*(run.modes[GREEDY.name] for run in runs), strict=True):
        timed = all(p.timed for p in prompts)
        summed.append(
            replace(
                prompts[0],
                decode_tokens=sum(p.decode_tokens or 0 for p in prompts) if timed else None,
                decode_seconds=sum(p.decode_seconds or 0.0 for p in prompts) if timed else None,
            )
        )
    return tuple(summed)


def _judged_drift(
    each: list[list[AtDraftTokens]], alone_runs: Sequence[EngineRun], target: str
) -> tuple[list[list[AtDraftTokens]], list[Finding]]:
    """Every speed-up withheld where the target alone's rate moved between its runs past the limit: its decode rate
    (every figure of the run), or its output rate at one C (the figures at that C)."""
    found = []
    sequential = drift_problem(target, [run.decode_tokens_per_second() for run in alone_runs])
    if sequential is not None:
        found.append(sequential)
        each = [[replace(at, drifted=True) for at in ats] for ats in each]
    for index, passes in enumerate(zip(*(run.concurrent for run in alone_runs), strict=True)):
        rates = [p.output_tokens_per_second().value for p in passes]
        c = passes[0].concurrency
        at_c = drift_problem(f"{target} at concurrency {c}", rates, c)
        if at_c is None:
            continue
        found.append(at_c)
        each = [[_drifted_at(at, index) for at in ats] for ats in each]
    return each, found


def _drifted_at(at: AtDraftTokens, index: int) -> AtDraftTokens:
    marked = list(at.at_concurrency)
    marked[index] = replace(marked[index], drifted=True)
    return replace(at, at_concurrency=tuple(marked))


def _runs_at(
    settings: Settings,
    source: Path,
    drafts: Sequence[QuantizedDraft],
    runner_at: Callable[[Settings], Runner],
    progress: Callable[[str], None],
    measure_same_bytes_once: bool,
    run_skipped: Callable[[], None],
    at_k: str,
) -> list[EngineRun]:
    """The source draft's run, then each quantized draft's, at ``settings``' one k (a draft serving bytes already
    measured at this k takes that run)."""
    run = runner_at(settings)
    progress(f"the source draft {source}{at_k}")
    source_run = run(1, source, f"draft {source}{at_k}")
    runs = [source_run]
    served: dict[str, tuple[EngineRun, Path]] = {}  # the served files' digest -> the run that served them
    if measure_same_bytes_once:
        served[served_digest(source)] = (source_run, source)
    for place, draft in enumerate(drafts, start=2):
        digest = served_digest(draft.served) if measure_same_bytes_once else str(len(served))
        if digest in served:
            engine_run, first = served[digest]
            progress(f"{draft.path}: serves the same bytes as {first}, measured once{at_k}")
            run_skipped()
        else:
            progress(f"{draft.path} ({draft.served_as}){at_k}")
            engine_run = run(place, draft.served, f"draft {draft.path}{at_k}")
            served[digest] = (engine_run, draft.path)
        runs.append(engine_run)
    return runs


def _at(
    served: Settings,
    run: EngineRun,
    source_run: EngineRun,
    alone: tuple[EngineRun, EngineRun],
    place: int,
    drafts: Sequence[QuantizedDraft],
) -> AtDraftTokens:
    """One draft's figures at one k (or the schedule, as ``served``): lossless against the target alone's first
    run, its greedy change against the source draft served alike (none for the source, at ``place`` 0), its decode
    speed-up over the target alone (``alone``: its first run, and its runs merged), and what of them breaks a
    physical limit."""
    k = served.draft_tokens
    tolerance = NEAR_TIE_NATS.get(served.dtype, 0.0)
    greedy, alone_greedy = run.modes[GREEDY.name], alone[0].modes[GREEDY.name]
    difference = None
    if place:
        change = paired_difference(run.acceptance(GREEDY.name), source_run.acceptance(GREEDY.name))
        difference = None if math.isnan(change.value) else change
    label = "source" if place == 0 else str(drafts[place - 1].path)
    acceptance = run.acceptance(GREEDY.name)
    faster = speedup(greedy, alone[1].modes[GREEDY.name])
    at = served.served_at()
    problems = acceptance_problems(label, k, acceptance, at) + speedup_problems(
        label, k, acceptance.length(), faster, at
    )
    at_c = tuple(
        _at_concurrency(label, served, acceptance.length(), drafted, by_alone)
        for drafted, by_alone in zip(run.concurrent, alone[1].concurrent, strict=True)
    )
    return AtDraftTokens(
        k, run, lossless(greedy, alone_greedy, tolerance), difference, faster, tuple(problems), at_concurrency=at_c,
        schedule=served.schedule,
    )  # fmt: skip


def _at_concurrency(
    label: str, served: Settings, length: Interval, drafted: ConcurrentPass, alone: ConcurrentPass
) -> AtConcurrency:
    """One draft at one k (or the schedule) and one C: its speed-up over the target alone at that C, within the same
    limits; under a schedule the k at C is the schedule's, so the pass's own acceptance length (1 where it drafted
    nothing) bounds its speed-up."""
    faster = concurrent_speedup(drafted, alone)
    if served.schedule:
        own = drafted.acceptance_length() or 1.0
        length = Interval(own, own, own)
    problems = speedup_problems(
        f"{label} with {drafted.concurrency} in flight", served.draft_tokens, length, faster, served.served_at()
    )
    return AtConcurrency(drafted.concurrency, drafted, faster, tuple(problems))
