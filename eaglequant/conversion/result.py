"""What a conversion did: the quantized linears' error figures, the files written with their SHA-256, and the
report (``eaglequant_report.json``) they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.version import __version__
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.record.report import (
    REPORT_VERSION,
    CardContext,
    ConversionReport,
    ManifestRecord,
    RecordedLinear,
    dtype_totals,
)
from eaglequant.schemes.model import scheme_to_toml


@dataclass
class LinearResult:
    module: str
    weight: str
    shape: tuple[int, int]
    relative_error: float
    sqnr_db: float


@dataclass(frozen=True)
class WrittenOutput:
    """What writing a plan's output made: the shards' SHA-256, the quantized linears' error figures, the
    source's files carried over, and the seconds it took."""

    files: dict[str, str]
    linears: list[LinearResult]
    copied_files: list[str]
    seconds: float


@dataclass(frozen=True)
class ConversionResult:
    destination: Path
    plan: ConversionPlan
    files: dict[str, str]  # output file -> sha256
    linears: list[LinearResult]
    seconds: float
    source_bytes: int
    output_bytes: int
    copied_files: list[str] = field(default_factory=list)
    source: Path | None = None
    verification: Any = None  # a VerifyReport when convert ran verify
    manifest: ManifestRecord | None = None  # see eaglequant.record.manifest
    card: CardContext | None = None  # see eaglequant.publish.card.card_context

    @classmethod
    def of(
        cls,
        destination: Path,
        plan: ConversionPlan,
        written: WrittenOutput,
        checkpoint: Checkpoint,
        manifest: ManifestRecord | None = None,
        card: CardContext | None = None,
    ) -> ConversionResult:
        """The result of writing ``plan``'s output from ``checkpoint``, bound for ``destination``."""
        return cls(
            destination,
            plan,
            written.files,
            written.linears,
            written.seconds,
            checkpoint.total_bytes,
            plan.output_bytes,
            written.copied_files,
            checkpoint.root.resolve(),
            manifest=manifest,
            card=card,
        )

    def report(self, *, timed: bool = False) -> ConversionReport:
        """What ``eaglequant_report.json`` records: the same for the same source, options and DST (no timing);
        ``timed``: with the seconds the conversion took, as ``convert --json`` writes it."""
        plan, verification = self.plan, self.verification
        return ConversionReport(
            eaglequant_version=__version__,
            report_version=REPORT_VERSION,
            destination=str(self.destination),
            source=None if self.source is None else str(self.source),
            layout=plan.head.layout,
            scheme=plan.scheme.name,
            scheme_label=plan.assignment.label,
            scheme_kinds=plan.scheme.kinds,
            scheme_toml=scheme_to_toml(plan.scheme),
            attention=plan.head.attention,
            format=plan.format.name,
            algorithm=plan.format.declared_algorithm(plan.config),
            notes=tuple(plan.notes),
            calibrated_input_amax=plan.input_amax,
            engines=tuple(e.key for e in plan.engines),
            target_layers=plan.target,
            quantized=tuple(
                RecordedLinear(r.weight.removesuffix(".weight"), r.shape, r.relative_error, r.sqnr_db)
                for r in self.linears
            ),
            kept=plan.kept,
            excluded_linears=plan.excluded_linears,
            exclude=tuple(plan.exclude_patterns),
            tensor_dtypes=dtype_totals((o.spec.dtype, o.spec.nbytes) for o in plan.outputs),
            source_bytes=self.source_bytes,
            output_bytes=self.output_bytes,
            files=self.files,
            copied_files=tuple(self.copied_files),
            manifest=self.manifest,
            card=self.card,
            verification=None if verification is None else verification.summary(),
            round_costs=tuple(plan.round_costs()),
            config_changes=tuple(plan.config_changes),
            own_schemes={
                module: scheme_to_toml(scheme) for module, scheme in sorted(plan.assignment.module_schemes.items())
            },
            seconds=self.reported_seconds if timed else None,
        )

    @property
    def reported_seconds(self) -> float:
        """The seconds the conversion took, to the millisecond, as ``convert`` reports them."""
        return round(self.seconds, 3)
