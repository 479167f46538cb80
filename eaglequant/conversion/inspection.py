"""What ``inspect`` reports: a checkpoint's files and head, and the plan for converting it, as rows and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from eaglequant.common.json_fields import JsonRecord
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.engines.target import TargetModel
from eaglequant.layouts.head import HeadDescription, HeadTensor, Role
from eaglequant.readback.cost import RoundCost


@dataclass(frozen=True)
class TensorPlan:
    tensor: HeadTensor
    quantized: bool
    reason: str  # why it keeps its source dtype ("" when quantized)

    @property
    def kept_linear(self) -> bool:
        return not self.quantized and self.tensor.role is Role.LINEAR


@dataclass(frozen=True)
class TensorRow(JsonRecord):
    """One tensor of the head, and what the plan does with it (``quantize``, or ``keep`` and why)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    file: str
    role: str
    action: str
    reason: str


@dataclass(frozen=True)
class RuntimeModuleRow(JsonRecord):
    """One runtime module of a targeted engine: whether it runs quantized, and the rule or reason why not."""

    engine: str
    module: str
    quantized: bool
    rule: str | None
    engine_reason: str | None


@dataclass(frozen=True)
class InspectRecord(JsonRecord):
    """What ``inspect --json`` prints (:meth:`InspectReport.record`): the source's files, its head, and the plan."""

    source: Path
    source_format: str
    files: list[str]
    layout: str
    layout_title: str
    reason: str  # why the head was read as its layout
    attention: str
    num_layers: int
    features: tuple[str, ...]
    dims: dict[str, Any]  # the dims the head's layout has
    fused_groups: dict[str, tuple[str, ...]]
    scheme: str
    scheme_for: dict[str, str]  # fc / lm_head -> the name of its own scheme
    format: str
    engines: tuple[str, ...]
    tensors: tuple[TensorRow, ...]
    exclude: list[str]  # the exclusion patterns the config will hold
    target_layers: TargetModel
    runtime_modules: tuple[RuntimeModuleRow, ...]
    source_bytes: int
    estimated_output_bytes: int
    round_costs: tuple[RoundCost, ...]


@dataclass
class InspectReport:
    """A source's files and head, and the plan for converting it; what ``inspect --json`` prints is its
    :meth:`record`."""

    source: Path
    source_format: str
    files: list[str]
    head: HeadDescription
    plan: ConversionPlan
    draft_tokens: int = DEFAULT_DRAFT_TOKENS  # k in the cost of a round

    def __post_init__(self) -> None:
        check_draft_tokens(self.draft_tokens)

    @property
    def round_costs(self) -> tuple[RoundCost, ...]:
        """Per targeted engine, the weight bytes a speculative round reads as converted, and as the source (as a
        :class:`~eaglequant.record.report.ConversionReport` holds them)."""
        return tuple(self.plan.round_costs(self.draft_tokens))

    @property
    def dims(self) -> dict[str, Any]:
        """The dims the head's layout has (those it has not are None in ``head.dims`` and left out)."""
        return {k: v for k, v in self.head.dims.__dict__.items() if v is not None}

    @property
    def source_bytes(self) -> int:
        return sum(t.info.nbytes for t in self.head.tensors)

    def tensor_plans(self) -> list[TensorPlan]:
        """Every tensor of the head, in order, with what the plan does with it."""
        kept = self.plan.kept  # every tensor the plan does not quantize, and why
        return [TensorPlan(t, t.name not in kept, kept.get(t.name, "")) for t in self.head.tensors]

    def rows(self) -> tuple[TensorRow, ...]:
        return tuple(
            TensorRow(
                *(row.tensor.name, row.tensor.info.dtype, tuple(row.tensor.info.shape), row.tensor.info.nbytes),
                *(row.tensor.info.file.name, row.tensor.role.value, "quantize" if row.quantized else "keep"),
                row.reason,
            )
            for row in self.tensor_plans()
        )

    def record(self) -> InspectRecord:
        """What ``inspect --json`` prints of it."""
        return InspectRecord(
            *(self.source, self.source_format, self.files, self.layout, self.layout_title, self.reason),
            *(str(self.attention), self.num_layers, self.features, self.dims, self.fused_groups, self.scheme),
            *(self.scheme_for, self.format, self.engines, self.rows(), self.exclude, self.target_layers),
            *(self.runtime_modules, self.source_bytes, self.estimated_output_bytes, self.round_costs),
        )

    # The head's and the plan's entries, as inspect --json writes them.

    @property
    def layout(self) -> str:
        return self.head.layout

    @property
    def layout_title(self) -> str:
        return self.head.layout_title

    @property
    def reason(self) -> str:
        """Why the head was read as its layout."""
        return self.head.reason

    @property
    def attention(self) -> str:
        return self.head.attention

    @property
    def num_layers(self) -> int:
        return self.head.num_layers

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.head.features)

    @property
    def fused_groups(self) -> dict[str, tuple[str, ...]]:
        return {group.name: tuple(group.members) for group in self.head.fused_groups}

    @property
    def scheme(self) -> str:
        return self.plan.scheme.name

    @property
    def scheme_for(self) -> dict[str, str]:
        """fc / lm_head -> the name of its own scheme."""
        return {module: scheme.name for module, scheme in sorted(self.plan.assignment.module_schemes.items())}

    @property
    def format(self) -> str:
        return self.plan.format.name

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(engine.key for engine in self.plan.engines)

    @property
    def exclude(self) -> list[str]:
        """The exclusion patterns the config will hold."""
        return self.plan.exclude_patterns

    @property
    def target_layers(self) -> TargetModel:
        return self.plan.target

    @property
    def estimated_output_bytes(self) -> int:
        return self.plan.output_bytes

    @property
    def runtime_modules(self) -> tuple[RuntimeModuleRow, ...]:
        """Each targeted engine's runtime modules, and whether it runs each quantized and why not."""
        return tuple(
            RuntimeModuleRow(v.engine, v.runtime_name, v.quantized, v.rule, v.engine_reason) for v in self.plan.verdicts
        )


def inspect_source(src: str | Path, options: ConversionOptions, draft_tokens: int) -> InspectReport:
    """The report on ``src`` (a directory or a Hub repo id, downloaded first) and the plan for converting it with
    ``options``, from headers only, with the round costs of ``draft_tokens`` tokens."""
    from eaglequant.conversion.source import planned
    from eaglequant.hub.client import resolve_source

    source = resolve_source(src)
    with planned(source, options) as (checkpoint, plan):
        files = [str(p.relative_to(checkpoint.root)) for p in checkpoint.weight_files]
        return InspectReport(source.path, checkpoint.source_format, files, plan.head, plan, draft_tokens)
