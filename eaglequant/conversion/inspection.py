"""What ``inspect`` reports: a checkpoint's files and head, and the plan for converting it, as rows and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from eaglequant.conversion.plan import ConversionPlan
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
class InspectReport:
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

    def to_json(self) -> dict[str, Any]:
        head = self.head
        return {
            "source": str(self.source),
            "source_format": self.source_format,
            "files": self.files,
            "layout": head.layout,
            "layout_title": head.layout_title,
            "reason": head.reason,
            "attention": head.attention,
            "num_layers": head.num_layers,
            "features": list(head.features),
            "dims": self.dims,
            "fused_groups": {g.name: list(g.members) for g in head.fused_groups},
            "scheme": self.plan.scheme.name,
            "scheme_for": {
                module: scheme.name for module, scheme in sorted(self.plan.assignment.module_schemes.items())
            },
            "format": self.plan.format.name,
            "engines": [e.key for e in self.plan.engines],
            "tensors": self.rows(),
            "exclude": self.plan.exclude_patterns,
            "target_layers": self.plan.target.to_json(),
            "runtime_modules": [
                {
                    "engine": v.engine,
                    "module": v.runtime_name,
                    "quantized": v.quantized,
                    "rule": v.rule,
                    "engine_reason": v.engine_reason,
                }
                for v in self.plan.verdicts
            ],
            "source_bytes": self.source_bytes,
            "estimated_output_bytes": self.plan.output_bytes,
            "round_costs": [cost.to_json() for cost in self.round_costs],
        }
