"""Planted faults: damage to a converted checkpoint that costs acceptance, for proving the gates catch it.

Each fault rewrites one tensor of a checkpoint ``convert`` wrote and records the new SHA-256s in its report (as a
buggy tool would leave it), so that only the numerical checks can see it. Used by the acceptance tests and
``scripts/acceptance_table.py --fault``: test equipment, not part of the package. The sizes are chosen so that each
fault passes the random-input gate of the previous release yet costs several points of acceptance on the bundled
trained pair.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from eaglequant.checkpoint.destination import REPORT_NAME


@dataclass(frozen=True)
class Fault:
    scheme: str
    format: str
    tensors: tuple[str, ...]  # the tensors rewritten
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
    "lm_head-token-scales": Fault(  # vLLM quantizes the ParallelLMHead from a ModelOpt config only
        "fp8-per-channel",
        "modelopt",
        ("lm_head.weight_scale",),
        _scale_rows(0.125, 1.06),
        "lm_head's weight scales ×1.06 on the rows of its first eighth of tokens (the byte-level ones, frequent "
        "in any text): each block 6% off, under the 8% block check",
        {"quantize": ["lm_head"]},
    ),
    "stale-fused-global-scale": Fault(
        "nvfp4",
        "modelopt",
        tuple(f"midlayer.self_attn.{m}_proj.weight_scale_2" for m in "qkv"),
        _times(1.08),
        "q/k/v's shared NVFP4 global scale from an older pass (×1.08, still shared, so no structure check sees it)",
    ),
}


def plant(dst: Path, name: str) -> str:
    """Apply fault ``name`` to the checkpoint in ``dst``; returns what it did."""
    from safetensors.torch import load_file, save_file

    from eaglequant.prediction.predict import tensor_names

    fault = FAULTS[name]
    for tensor in fault.tensors:
        path = next((f for f in sorted(dst.glob("*.safetensors")) if tensor in tensor_names(f)), None)
        if path is None:
            raise KeyError(f"{dst}: no tensor {tensor}")
        tensors = load_file(str(path))
        tensors[tensor] = fault.change(tensors[tensor]).contiguous()
        save_file(tensors, str(path), metadata={"format": "pt"})
    report_path = dst / REPORT_NAME
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        report["files"] = {n: hashlib.sha256((dst / n).read_bytes()).hexdigest() for n in report.get("files", {})}
        report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return fault.what
