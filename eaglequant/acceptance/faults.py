"""Planted faults: damage to a converted checkpoint that costs acceptance, for proving the gates catch it.

Each fault rewrites one tensor of a checkpoint ``convert`` wrote and records the new SHA-256s in its report (as a
buggy tool would leave it), so that only the numerical checks can see it. Used by
``scripts/acceptance_table.py`` and the tests; the sizes are chosen so that each fault passes the random-input
gate of the previous release yet costs several points of acceptance on the bundled trained pair.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Fault:
    scheme: str
    format: str
    tensor: str  # the tensor rewritten
    change: Callable[[torch.Tensor], torch.Tensor]
    what: str
    options: dict[str, Any] = field(default_factory=dict)  # convert options


def _scale_rows(fraction: float, factor: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Multiply the first ``fraction`` of a scale tensor's rows (blocks of output rows) by ``factor``."""

    def change(scale: torch.Tensor) -> torch.Tensor:
        out = scale.to(torch.float32).clone()
        rows = max(1, int(out.shape[0] * fraction))
        out[:rows] *= factor
        return out.to(scale.dtype)

    return change


def _times(factor: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: (t.to(torch.float32) * factor).to(t.dtype)


FAULTS: dict[str, Fault] = {
    "lm_head-row-scales": Fault(
        "fp8-per-channel",
        "quark",
        "lm_head.weight_scale",
        _scale_rows(0.125, 1.25),
        "the weight scales of lm_head's first eighth of rows ×1.25 (fp8-per-channel, lm_head quantized)",
        {"quantize": ["lm_head"]},
    ),
    "o_proj-row-scales": Fault(
        "fp8-per-channel",
        "quark",
        "midlayer.self_attn.o_proj.weight_scale",
        _scale_rows(0.25, 1.3),
        "the weight scales of o_proj's first quarter of rows ×1.3 (fp8-per-channel)",
    ),
    "stale-fused-global-scale": Fault(
        "nvfp4",
        "modelopt",
        "midlayer.self_attn.q_proj.weight_scale_2",
        _times(1.3),
        "q_proj's NVFP4 global scale from an older pass (×1.3), k/v left as written: a stale fused scale",
    ),
}


def plant(dst: Path, name: str) -> str:
    """Apply fault ``name`` to the checkpoint in ``dst``; returns what it did."""
    from safetensors.torch import load_file, save_file

    fault = FAULTS[name]
    files = sorted(dst.glob("*.safetensors"))
    target = next((f for f in files if fault.tensor in _names(f)), None)
    if target is None:
        raise KeyError(f"{dst}: no tensor {fault.tensor}")
    tensors = load_file(str(target))
    tensors[fault.tensor] = fault.change(tensors[fault.tensor]).contiguous()
    save_file(tensors, str(target), metadata={"format": "pt"})
    report_path = dst / "eaglequant_report.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        report["files"] = {n: hashlib.sha256((dst / n).read_bytes()).hexdigest() for n in report.get("files", {})}
        report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return fault.what


def _names(path: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        return set(handle.keys())
