"""The acceptance job: quantized drafts measured against their source with the engine's own speculative decoding
(:mod:`eaglequant.measurement`), the figures recorded into each DST and its card refreshed
(:mod:`eaglequant.publish`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.measurement.served import DEQUANTIZED
from eaglequant.measurement.server_acceptance import DEFAULT_TEMPERATURES

if TYPE_CHECKING:
    from eaglequant.common.progress import Steps
    from eaglequant.measurement.measure import AcceptanceReport


def measure_and_record(
    dsts: Sequence[str | Path],
    *,
    target: str | Path | None = None,
    source: str | Path | None = None,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    draft_tokens: int | str | Sequence[int] = DEFAULT_DRAFT_TOKENS,
    max_tokens: int = 96,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    served_as: str = DEQUANTIZED,
    dtype: str = "bfloat16",
    engine: str = "vllm",
    engine_python: str | Path | None = None,
    tensor_parallel_size: int | None = None,
    engine_args: Mapping[str, Any] | Sequence[str] | None = None,
    server: Sequence[str] = (),
    reference_server: str | None = None,
    launch: bool = False,
    port: int | None = None,
    window_s: float | None = None,
    seed: int = 0,
    record: bool = True,
    target_alone_runs: int = 2,
    concurrency: str | Sequence[int] = (),
    schedule: str | Sequence[Sequence[int]] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    steps: Steps | None = None,
) -> AcceptanceReport:
    """:func:`eaglequant.api.acceptance.accept`: the settings checked, where it runs chosen, each draft measured,
    and (with ``record``) ``eaglequant_accept.json`` written into each DST and its card refreshed."""
    from eaglequant.measurement import runners as measurement
    from eaglequant.measurement.engine_args import engine_arguments

    arguments = engine_arguments(engine_args, tensor_parallel_size)
    measurement.check_settings(engine, served_as, temperatures, draft_tokens, max_tokens)
    where = measurement.where_of(
        engine=engine, engine_python=engine_python, served_as=served_as, arguments=arguments, server=server,
        reference_server=reference_server, launch=launch, dsts=len(dsts), port=port, window_s=window_s,
    )  # fmt: skip
    report = measurement.accept(
        dsts, where, target=target, source=source, prompts=prompts, max_prompts=max_prompts,
        draft_tokens=draft_tokens, max_tokens=max_tokens, temperatures=temperatures, dtype=dtype, seed=seed,
        progress=progress, steps=steps, target_alone_runs=target_alone_runs, concurrency=concurrency,
        schedule=schedule,
    )  # fmt: skip
    if record:
        recorded(report)
    return report


def recorded(report: AcceptanceReport) -> None:
    """``eaglequant_accept.json`` written into each DST measured, and its card refreshed to show it."""
    from eaglequant.measurement.record import write_acceptance
    from eaglequant.publish.card import refresh_card

    for draft in report.quantized:
        write_acceptance(draft.path, report.for_draft(draft.label).record())
        refresh_card(draft.path)
