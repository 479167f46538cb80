"""A written checkpoint verified: against the source given or the one its records name, for the engines chosen or
those its report recorded, and loaded by the engines' own code when asked (:mod:`eaglequant.engine_load`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.common.draft_tokens import DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.errors import InputError
from eaglequant.engines.target import TargetModel
from eaglequant.record.as_recorded import open_written
from eaglequant.verification.fidelity import DEFAULT_TOKENS

if TYPE_CHECKING:
    from eaglequant.engine_load import LoadCheck
    from eaglequant.prediction.predict import PredictionSettings
    from eaglequant.record.report import ConversionReport
    from eaglequant.schemes.model import Scheme
    from eaglequant.verification.verify import VerifyReport


def verify_recorded(
    dst: str | Path,
    *,
    source: str | Path | None = None,
    engines: Sequence[str] = (),
    target_layers: int | None = None,
    target_config: str | Path | None = None,
    seed: int = 0,
    tokens: int = DEFAULT_TOKENS,
    load_with: Sequence[str] = (),
    engine_python: str | Path | None = None,
    inputs: str | Path | None = None,
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
    device: str = "cpu",
) -> VerifyReport:
    """:func:`eaglequant.api.verify`: ``dst`` verified against ``source``, or the one its records name when it is
    still on disk; then loaded by each engine of ``load_with``."""
    from eaglequant.engine_load import get_probe
    from eaglequant.engines import ALL_ENGINES, chosen_engines
    from eaglequant.hub.client import resolve_source
    from eaglequant.prediction.predict import PredictionSettings

    prediction = PredictionSettings(max_draft_tokens, device)
    load_engines = [get_probe(name).engine for name in dict.fromkeys(load_with)]
    names = chosen_engines(engines)
    dst_path = Path(dst)
    source = recorded_source_of(dst_path) if source is None else source
    source_path = None if source is None else resolve_source(source, param="source").path
    report = verify_written(
        dst_path,
        source_path,
        names,
        every_engine=ALL_ENGINES in engines,
        target_layers=target_layers,
        target_config=target_config,
        seed=seed,
        tokens=tokens,
        inputs=None if inputs is None else Path(inputs),
        prediction=prediction,
    )
    for engine in load_engines:
        report.engine_loads += load_checks(
            [dst_path], engine=engine, sources=[source_path], engine_python=engine_python
        )
    return report


def recorded_source_of(dst: Path) -> str | None:
    """The source search judged its pick against, else the one DST was converted from; None where neither is a
    directory still."""
    from eaglequant.record.report import read_report, recorded_source
    from eaglequant.record.search import searched_judge

    judge = searched_judge(dst)
    recorded = judge.source if judge is not None and Path(judge.source).is_dir() else None
    recorded = recorded or recorded_source(read_report(dst))
    return recorded if recorded and Path(recorded).is_dir() else None


def verify_written(
    dst: Path,
    source: Path | None,
    engines: list[str] | None,
    *,
    every_engine: bool = False,
    target_layers: int | None = None,
    target_config: str | Path | None = None,
    seed: int = 0,
    tokens: int = DEFAULT_TOKENS,
    inputs: Path | None = None,
    hashed_while_writing: bool = False,
    written: tuple[ConversionReport, Scheme] | None = None,
    target: TargetModel | None = None,
    prediction: PredictionSettings | None = None,
) -> VerifyReport:
    """``target``: the target's layer count when already known (``convert --verify``: the plan's), else resolved
    from ``target_layers``, ``target_config`` or DST's report; ``prediction``: how acceptance is predicted on
    ``inputs`` (default: every k to 8, on the CPU)."""
    from eaglequant.verification.verify import verify_checkpoint

    with open_written(dst, target_layers, target_config, target) as (checkpoint, head, target):
        return verify_checkpoint(
            dst,
            head,
            checkpoint,
            source=source,
            engines=engines,
            every_engine=every_engine,
            target=target,
            seed=seed,
            tokens=tokens,
            inputs=inputs,
            hashed_while_writing=hashed_while_writing,
            written=written,
            prediction=prediction,
        )


def load_checks(
    dsts: Sequence[str | Path],
    *,
    engine: str,
    sources: Sequence[str | Path | None] | None = None,
    engine_python: str | Path | None = None,
) -> list[LoadCheck]:
    """:func:`eaglequant.api.load_checks`: each checkpoint in ``dsts`` loaded by ``engine``'s own code in one
    process, each held against eaglequant's reading of it for that engine."""
    from eaglequant.engine_load import LoadJob, judge, run_probe
    from eaglequant.verification.expected import expectation

    chosen = list(sources) if sources is not None else [None] * len(dsts)
    if len(chosen) != len(dsts):
        raise InputError(f"{len(dsts)} checkpoints but {len(chosen)} sources", hint="give one source per checkpoint")
    expected, jobs = [], []
    for dst, source in zip(dsts, chosen, strict=True):
        with open_written(dst, None, None) as (checkpoint, head, target):
            expected.append(expectation(checkpoint, head, target, engine))
        jobs.append(LoadJob(Path(dst), None if source is None else Path(source), expected[-1].target_layers))
    run = run_probe(engine, jobs, engine_python)
    return [judge(run, index, wanted) for index, wanted in enumerate(expected)]
