"""A conversion as the API runs it: the source opened, one :class:`ConversionRequest` made from the options (or
taken as the caller made it), the plan built from it, the output written, verified when asked, and committed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.checkpoint.destination import check_destination
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError
from eaglequant.common.progress import NoProgress, Progress
from eaglequant.conversion.manifest_options import manifest_options
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.pipeline import write_output
from eaglequant.conversion.plan import ConversionPlan, build_plan
from eaglequant.conversion.request import ConversionRequest
from eaglequant.conversion.result import ConversionResult
from eaglequant.engines.target import TargetModel
from eaglequant.hub.client import SourceRef, resolve_source
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription
from eaglequant.record.written import open_written
from eaglequant.verification.fidelity import DEFAULT_TOKENS

if TYPE_CHECKING:
    from eaglequant.checkpoint.destination import StagedDirectory
    from eaglequant.prediction.predict import PredictionSettings
    from eaglequant.record.report import ConversionReport
    from eaglequant.schemes.model import Scheme
    from eaglequant.verification.verify import VerifyReport


def open_source(src: str | Path) -> tuple[Checkpoint, HeadDescription]:
    checkpoint = Checkpoint.open(src)
    try:
        existing = checkpoint.config.get("quantization_config")
        if existing is not None:
            method = existing.get("quant_method", "?") if isinstance(existing, dict) else "?"
            raise InputError(
                f"{checkpoint.root / 'config.json'}: the checkpoint is already quantized (quant_method {method!r})",
                hint="start from the BF16 head the trainer released",
            )
        return checkpoint, describe_head(checkpoint)
    except BaseException:
        checkpoint.close()
        raise


@contextmanager
def planned(
    source: SourceRef,
    options: ConversionOptions,
    *,
    calibrate: bool = False,
    request: ConversionRequest | None = None,
) -> Iterator[tuple[Checkpoint, ConversionPlan]]:
    """The source opened, and the plan for it: ``options`` become one :class:`ConversionRequest` here (unless the
    caller made it from them already: ``request``), which the plan takes as it is (from headers only; with
    ``calibrate`` and a ``calib`` file, after the calibration forward)."""
    checkpoint, head = open_source(source.path)
    with checkpoint:
        request = request or ConversionRequest.of(options, head.config)
        input_amax = None
        if calibrate and options.calib is not None:
            from eaglequant.draft.calibrate import calibrate as calibrated_amax

            input_amax = calibrated_amax(checkpoint, head, options.calib)
        yield checkpoint, build_plan(head, request, input_amax=input_amax)


def write_conversion(
    src: str | Path,
    dst: str | Path,
    options: ConversionOptions,
    *,
    request: ConversionRequest | None = None,
    overwrite: bool = False,
    overwrite_any: bool = False,
    progress: Progress | None = None,
    stage: StagedDirectory | None = None,
) -> ConversionResult:
    """:func:`convert` with its options built: ``request``, where the caller made it from ``options`` and the head's
    config already (``search`` writes the very request it priced), is planned as it is."""
    from eaglequant.checkpoint.destination import staged_directory
    from eaglequant.conversion.devices import quantization_device
    from eaglequant.conversion.finisher import record_output
    from eaglequant.publish.card import CARD_NAME, write_card
    from eaglequant.publish.card_source import card_context, source_card_metadata
    from eaglequant.record.manifest import background_digests, conversion_manifest

    chosen = options
    dst_path = Path(dst)
    quantization_device(chosen.device)  # a missing GPU is bad input, said before any work
    source = resolve_source(src)
    check_destination(source.path, dst_path, overwrite, overwrite_any)
    progress = progress or NoProgress()
    staging = staged_directory(dst_path) if stage is None else nullcontext(stage)
    with planned(source, chosen, calibrate=True, request=request) as (checkpoint, plan), staging as staged:
        digests = background_digests(source.path)  # once the plan holds: hashing overlaps the conversion
        source_meta = source_card_metadata(source.path, plan.notes)
        written = write_output(
            checkpoint,
            plan,
            staged.path,
            replaced=(CARD_NAME,),
            max_shard_bytes=chosen.max_shard_bytes,
            progress=progress,
            workers=chosen.workers,
            device=chosen.device,
        )
        progress.phase("hashing the source")  # what the background hashing has not read yet
        manifest = conversion_manifest(source, manifest_options(chosen, plan.target), digests.result())
        draft = chosen.repo_id or str(dst_path.resolve())
        card = card_context(source_meta, plan.head.config, source.repo_id, draft)
        result = ConversionResult.of(dst_path, plan, written, checkpoint, manifest, card)
        if chosen.verify_output:
            progress.phase("verifying")
            result = verified(staged.path, result, source.path, chosen)
        write_card(staged.path, result.report(), result.verification)
        result = record_output(staged.path, result)
        if stage is None:
            staged.commit(result.destination, overwrite=overwrite or overwrite_any)
        progress.stop()
    return result


def verified(stage: Path, result: ConversionResult, source: Path, options: ConversionOptions) -> ConversionResult:
    """``result`` with the verification of its output, staged but reported under its final name, and the
    destination it goes to: DST, or ``DST.verify-failed`` beside it, named so nobody takes it for DST, when it
    fails. The calibration inputs, when there are some, are also the draft-head fidelity run's."""
    from eaglequant.common.memory import return_freed_memory
    from eaglequant.verification.verify import write_verify_report

    return_freed_memory()  # the writing phase's buffers, before verification's peak
    report = verify_written(
        stage,
        source,
        [engine.key for engine in result.plan.engines],
        target=result.plan.target.recorded(),
        inputs=None if options.calib is None else Path(options.calib),
        hashed_while_writing=True,  # the report's digests were taken from these bytes moments ago
        written=(result.report(), result.plan.scheme),
    )
    report.destination = result.destination
    write_verify_report(report, stage)
    failed = result.destination.with_name(f"{result.destination.name}.verify-failed")
    destination = result.destination if report.ok else failed
    return replace(result, verification=report, destination=destination)


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
