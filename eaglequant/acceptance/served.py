"""The draft directory an acceptance run gives the engine.

A quantized draft is served as it is stored where the engine runs its kernels; where it cannot (vLLM on CPU
runs no FP4 kernel, and FP8 only very slowly), it is served as its weights dequantized: every linear the
engine would run quantized is replaced by exactly what the fused kernels compute from the stored bytes
(float32, then the serving dtype), and every other tensor and the config are DST's own. That measures the
weight-only effect of the conversion; activation quantization (W8A8, W4A4) is not in it, and the run says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.engines.target import TargetLayers
from eaglequant.layouts.head import HeadDescription

STORED, DEQUANTIZED = "stored", "dequantized"
SERVED_AS = (STORED, DEQUANTIZED)
_QUANTIZATION_KEYS = ("quantization_config", "compression_config")
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def quantized_modules(checkpoint: Checkpoint, head: HeadDescription, target: TargetLayers, engine: str) -> set[str]:
    """Checkpoint modules ``engine`` runs quantized, as eaglequant reads the checkpoint for it."""
    from eaglequant.readback import explain_checkpoint

    explanation = explain_checkpoint(checkpoint, head, [engine], target)
    return {member for reading in explanation.engines for m in reading.modules if m.scheme for member in m.members}


def write_dequantized(
    checkpoint: Checkpoint, head: HeadDescription, modules: set[str], out: Path, dtype: str
) -> list[str]:
    """Write ``checkpoint`` to ``out`` with the linears in ``modules`` dequantized to ``dtype``; returns them."""
    import torch
    from safetensors.torch import save_file

    from eaglequant.readback import read_written_config
    from eaglequant.schemes.model import scheme_for_kinds

    fmt, written = read_written_config(checkpoint)
    scheme = scheme_for_kinds(written.kinds)
    torch_dtype = getattr(torch, _DTYPES[dtype])
    tensors: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    done = []
    for linear in head.linears:
        if linear.checkpoint_module not in modules:
            continue
        names = [spec.name for spec in fmt.tensor_specs(linear, scheme)]
        stored = fmt.stored_linear(linear, scheme, {name: checkpoint.read(name) for name in names})
        tensors[f"{linear.checkpoint_module}.weight"] = stored.dequantize().to(torch_dtype).contiguous()
        consumed.update(names)
        done.append(linear.checkpoint_module)
    for name in checkpoint.tensors:
        module = name.rpartition(".")[0]
        if name not in consumed and module not in modules:
            tensors[name] = checkpoint.read(name).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {k: v for k, v in checkpoint.config.items() if k not in _QUANTIZATION_KEYS}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for extra in ("generation_config.json",):
        if (checkpoint.root / extra).is_file():
            shutil.copyfile(checkpoint.root / extra, out / extra)
    return sorted(done)
