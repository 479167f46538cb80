"""Where the quantization math runs: ``cpu`` (the default) or ``cuda``.

On ``cuda`` each block of rows is read from the file on the CPU, copied to the GPU, quantized there with the
same torch operations as on the CPU, and its tensors copied back before they are written. Every operation
involved (elementwise IEEE float arithmetic, round-to-nearest-even casts, max reductions) gives the same
bits on both devices, so the written tensors are byte-identical; only the error sums shown in the report
(float reductions in another order) may differ in their last digits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglequant.common.errors import InputError, given, words

if TYPE_CHECKING:
    import torch

    from eaglequant.formats.base import GroupScales

DEVICES = ("cpu", "cuda")


def check_device_name(name: str) -> str:
    """``name``'s kind ("cpu" or "cuda") if eaglequant runs on it; whether the machine has it is not asked."""
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and (kind == "cpu" or not index.isdigit())):
        raise InputError(
            words(given("device", name), " is not one eaglequant runs on"), hint="use cpu or cuda (or cuda:N)"
        )
    return kind


def available_device() -> str:
    """Where verification's math runs: a CUDA GPU when there is one, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def quantization_device(name: str) -> torch.device | None:
    """The torch device for ``name`` ("cpu", "cuda", "cuda:1"); None for the CPU (no copies needed, and no torch
    import: it is started in the background while the first tensors are copied)."""
    if check_device_name(name) == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        raise InputError(
            words(given("device", name), f": this torch ({torch.__version__}) sees no CUDA GPU"),
            hint="quantize on the CPU (the default), or install a CUDA build of torch on a machine with a GPU",
        )
    device = torch.device(name)
    if device.index is not None and device.index >= torch.cuda.device_count():
        here = f": only {torch.cuda.device_count()} CUDA device(s) here"
        raise InputError(words(given("device", name), here), hint="use cuda:0")
    return device


def shared_on(shared: GroupScales, device: torch.device) -> GroupScales:
    """A fused group's shared values, moved to ``device``."""
    from eaglequant.formats.base import GroupScales

    def move(value: torch.Tensor | None) -> torch.Tensor | None:
        return None if value is None else value.to(device)

    return GroupScales(move(shared.weight_amax), move(shared.input_amax))
