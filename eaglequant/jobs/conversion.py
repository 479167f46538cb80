"""The conversion job: the source opened, one :class:`ConversionRequest` made from the options (or taken as the
caller made it), the plan built from it, the output written, verified when asked, carded and committed."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.checkpoint.destination import check_destination
from eaglequant.common.json_fields import NOT_WRITTEN, JsonRecord, named
from eaglequant.common.progress import NoProgress, Progress
from eaglequant.conversion.manifest_options import manifest_options
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.pipeline import write_output
from eaglequant.conversion.request import ConversionRequest
from eaglequant.conversion.result import ConversionResult
from eaglequant.conversion.source import planned
from eaglequant.hub.client import resolve_source
from eaglequant.record.report import ConversionReport
from eaglequant.verification.verify import VerifyReport

if TYPE_CHECKING:
    from eaglequant.checkpoint.destination import StagedDirectory


@dataclass(frozen=True)
class ConvertOutput(JsonRecord):
    """What ``convert --json`` prints: the report (its destination absolute, with the conversion's seconds), its
    ``verification`` the full verification where ``--verify`` ran (its destination absolute too)."""

    json_inlined = ("report",)
    json_values = named(verification=lambda verification: NOT_WRITTEN if verification is None else verification)

    report: ConversionReport
    verification: VerifyReport | None = None


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
    """:func:`eaglequant.api.convert` with its options built: ``request``, where the caller made it from ``options``
    and the head's config already (``search`` writes the very request it priced), is planned as it is."""
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
    from eaglequant.verification.written import verify_written

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
