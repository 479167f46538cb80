"""The tensors a conversion writes: every source tensor copied byte for byte, or the tensors the format stores for
a quantized linear, sorted by name, each written once."""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.errors import InputError
from eaglequant.formats.base import HeadStorage
from eaglequant.layouts.head import HeadDescription, HeadLinear


@dataclass(frozen=True)
class OutputTensor:
    spec: TensorSpec
    source: str  # checkpoint tensor copied byte for byte, or the weight of the linear it was quantized from
    quantized_from: str | None = None  # canonical module when quantized


def planned_outputs(head: HeadDescription, storage: HeadStorage, quantized: list[HeadLinear]) -> list[OutputTensor]:
    """Every tensor of ``head`` copied, but the ``quantized`` linears' weights, written as ``storage`` says. Refuses a
    source whose tensor names collide with the names the quantized output needs."""
    outputs: list[OutputTensor] = []
    by_weight = {lin.weight: lin for lin in quantized}
    for tensor in head.tensors:
        linear = by_weight.get(tensor.name)
        if linear is None:
            info = tensor.info
            outputs.append(OutputTensor(TensorSpec(tensor.name, info.dtype, info.shape), tensor.name))
            continue
        for spec in storage.specs[linear.module]:
            outputs.append(OutputTensor(spec, tensor.name, linear.module))
    names = [o.spec.name for o in outputs]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:
        held = next((t.info.file for t in head.tensors if t.name == clash), None)
        raise InputError(
            f"{held}: holds tensor {clash!r}, a name the quantized output needs for its own tensor"
            if held is not None
            else f"output tensor {clash!r} would be written twice",
            hint="the source looks partly quantized already; start from the BF16 head the trainer released",
        )
    return sorted(outputs, key=lambda o: o.spec.name)
