"""Activation kinds: how an engine quantizes a linear's input at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eaglequant.kinds.base import ActivationKind
from eaglequant.numerics.limits import E4M3_MAX

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Fp8GroupKind(ActivationKind):
    """Dynamic FP8 E4M3, one scale per token per group of ``block_size`` in-features (None: the whole row),
    floored at ``min_scale`` as the engine's quantization kernel floors it."""

    simulated: ClassVar[bool] = True

    def simulate(self, x: torch.Tensor) -> torch.Tensor:
        from eaglequant.numerics.fp8 import dequantize_token_groups, quantize_token_groups

        group = self.block_size if isinstance(self.block_size, int) else x.shape[1]
        return dequantize_token_groups(*quantize_token_groups(x, group, self.min_scale))


# vLLM's scaled_fp8_quant floors a token's scale at 1 / (448 * 512).
MIN_TOKEN_SCALE = 1.0 / (E4M3_MAX * 512.0)
FP8_TOKEN = Fp8GroupKind(
    "fp8-token",
    "fp8_e4m3",
    "token",
    None,
    "float32",
    False,
    "FP8 E4M3, one scale per token at run time",
    min_scale=MIN_TOKEN_SCALE,
)
# vLLM's and SGLang's per_token_group_quant_fp8: scale = max(amax, 1e-10) / 448.
FP8_GROUP = Fp8GroupKind(
    "fp8-group",
    "fp8_e4m3",
    "group",
    128,
    "float32",
    False,
    "FP8 E4M3, one scale per token per 128 at run time",
    min_scale=1e-10 / E4M3_MAX,
)
NVFP4_ACTIVATIONS = ActivationKind(
    "nvfp4", "fp4_e2m1", "block", 16, "fp8_e4m3", True, "NVFP4, block scales at run time, static global"
)
MXFP4_ACTIVATIONS = ActivationKind("mxfp4", "fp4_e2m1", "block", 32, "e8m0", False, "MXFP4, block scales at run time")
