"""The draft directory an acceptance run gives the engine.

A quantized draft is served as it is stored where the engine runs its kernels; where it cannot (vLLM on CPU
runs no FP4 kernel, and FP8 only very slowly), it is served as its weights dequantized: every linear the
engine would run quantized is replaced by exactly what the fused kernels compute from the stored bytes
(float32, then the serving dtype; members of a fused linear with the global scale vLLM gives them), and every
other tensor and the config are DST's own. That measures the
weight-only effect of the conversion; activation quantization (W8A8, W4A4) is not in it, and the run says so.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError, given, words
from eaglequant.engines.target import TargetModel
from eaglequant.layouts.head import HeadDescription

STORED, DEQUANTIZED = "stored", "dequantized"
SERVED_AS = (STORED, DEQUANTIZED)
_QUANTIZATION_KEYS = ("quantization_config", "compression_config")
_DTYPES = ("bfloat16", "float16", "float32")
_GLOBAL_SCALES = ("weight_scale_2", "weight_global_scale")


def quantized_modules(checkpoint: Checkpoint, head: HeadDescription, target: TargetModel, engine: str) -> set[str]:
    """Checkpoint modules ``engine`` runs quantized, as eaglequant reads the checkpoint for it."""
    from eaglequant.readback.explanation import explain_checkpoint

    return explain_checkpoint(checkpoint, head, [engine], target).quantized_members


def fused_global_scales(checkpoint: Checkpoint, head: HeadDescription, modules: set[str]) -> dict[str, Any]:
    """What vLLM's fused linears (q/k/v, gate/up) read for a per-tensor global scale: the largest stored value of
    its members, given to every member without re-scaling their codes (ModelOpt's ``weight_scale_2``;
    compressed-tensors' ``weight_global_scale``, a divisor, so its largest is the smallest multiplier), in
    ``model_executor/layers/quantization/modelopt.py`` and ``compressed_tensors_w4a4_nvfp4.py``. A conversion
    writes them equal; a stale one changes every member."""
    import torch

    found: dict[str, Any] = {}
    for group in head.fused_groups:
        members = [head.linear(m).checkpoint_module for m in group.members]
        if not set(members) <= modules:
            continue
        for param in _GLOBAL_SCALES:
            names = [f"{m}.{param}" for m in members if f"{m}.{param}" in checkpoint.tensors]
            if len(names) > 1:
                values = [checkpoint.read(n) for n in names]
                largest = torch.stack([v.to(torch.float32).reshape(-1) for v in values]).amax(0)
                found.update({n: largest.reshape(v.shape).to(v.dtype) for n, v in zip(names, values, strict=True)})
    return found


def write_dequantized(
    checkpoint: Checkpoint, head: HeadDescription, modules: set[str], out: Path, dtype: str
) -> list[str]:
    """Write ``checkpoint`` to ``out`` with the linears in ``modules`` dequantized to ``dtype``; returns them. The
    file's header is laid out first and each tensor is made and written in turn, so memory holds one at a time."""
    import torch

    from eaglequant.checkpoint.dtypes import from_torch
    from eaglequant.checkpoint.writer import TensorSpec, safetensors_header
    from eaglequant.readback.explanation import read_written_config
    from eaglequant.readback.module_kinds import written_schemes

    fmt, written = read_written_config(checkpoint)
    schemes = written_schemes(written, head)
    if dtype not in _DTYPES:
        raise InputError(words(given("dtype", dtype), f": not one of {', '.join(_DTYPES)}"), hint="use bfloat16")
    torch_dtype = getattr(torch, dtype)
    shared = fused_global_scales(checkpoint, head, modules)
    planned: list[tuple[TensorSpec, Callable[[], torch.Tensor]]] = []
    consumed: set[str] = set()
    for linear in head.linears:
        if linear.checkpoint_module not in modules:
            continue
        scheme = schemes.of(linear.module)
        names = [spec.name for spec in fmt.tensor_specs(linear, scheme)]
        consumed.update(names)

        def dequantized(linear: Any = linear, scheme: Any = scheme, names: list[str] = names) -> torch.Tensor:
            read = {name: shared.get(name, checkpoint.read(name)) for name in names}
            return fmt.stored_linear(linear, scheme, read).dequantize().to(torch_dtype)

        shape = (linear.out_features, linear.in_features)
        planned.append((TensorSpec(f"{linear.checkpoint_module}.weight", from_torch(torch_dtype), shape), dequantized))
    for name, info in checkpoint.tensors.items():
        if name not in consumed and (name.rpartition(".")[0] not in modules or name.endswith(".bias")):  # biases stay
            planned.append((TensorSpec(name, info.dtype, info.shape), partial(checkpoint.read, name)))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "model.safetensors", "wb") as handle:
        handle.write(safetensors_header([spec for spec, _ in planned], {"format": "pt"}))
        for spec, make in planned:
            tensor = make().contiguous()
            if tuple(tensor.shape) != spec.shape or from_torch(tensor.dtype) != spec.dtype:
                raise InputError(f"{checkpoint.root}: {spec.name} is {tuple(tensor.shape)}, not {spec.shape}")
            handle.write(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    config = {k: v for k, v in checkpoint.config.items() if k not in _QUANTIZATION_KEYS}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for extra in ("generation_config.json",):
        if (checkpoint.root / extra).is_file():
            shutil.copyfile(checkpoint.root / extra, out / extra)
    return sorted(linear.checkpoint_module for linear in head.linears if linear.checkpoint_module in modules)
