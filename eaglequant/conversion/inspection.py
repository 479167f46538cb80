"""What ``inspect`` reports: a checkpoint's files and head, and the plan for converting it, as rows and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from eaglequant.common.json_fields import JsonRecord, named
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


@dataclass
class InspectReport(JsonRecord):
    """A source's files and head, and the plan for converting it; written with the head's and the plan's entries."""

    json_omitted = ("head", "plan", "draft_tokens")
    json_computed = (
        *("layout", "layout_title", "reason", "attention", "num_layers", "features", "dims", "fused_groups"),
        *("scheme", "scheme_for", "format", "engines", "rows", "exclude", "target_layers", "runtime_modules"),
        *("source_bytes", "estimated_output_bytes", "round_costs"),
    )
    json_renamed = named(rows="tensors")
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

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "name": row.tensor.name,
                "dtype": row.tensor.info.dtype,
                "shape": list(row.tensor.info.shape),
                "bytes": row.tensor.info.nbytes,
                "file": row.tensor.info.file.name,
                "role": row.tensor.role.value,
                "action": "quantize" if row.quantized else "keep",
                "reason": row.reason,
            }
            for row in self.tensor_plans()
        ]

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
    def runtime_modules(self) -> list[dict[str, Any]]:
        """Each targeted engine's runtime modules, and whether it runs each quantized and why not."""
        return [
            {
                "engine": v.engine,
                "module": v.runtime_name,
                "quantized": v.quantized,
                "rule": v.rule,
                "engine_reason": v.engine_reason,
            }
            for v in self.plan.verdicts
        ]


def inspect_source(src: str | Path, options: ConversionOptions, draft_tokens: int) -> InspectReport:
    """The report on ``src`` (a directory or a Hub repo id, downloaded first) and the plan for converting it with
    ``options``, from headers only, with the round costs of ``draft_tokens`` tokens."""
    from eaglequant.conversion.source import planned
    from eaglequant.hub.client import resolve_source

    source = resolve_source(src)
    with planned(source, options) as (checkpoint, plan):
        files = [str(p.relative_to(checkpoint.root)) for p in checkpoint.weight_files]
        return InspectReport(source.path, checkpoint.source_format, files, plan.head, plan, draft_tokens)
