"""Each layout the fused dequant-GEMM kernels read, made from one weight: shared by the Triton and dispatch tests."""

from __future__ import annotations

import torch

from eaglequant.kernels import StoredLinear
from eaglequant.kinds import FP8_CHANNEL, FP8_TOKEN, MXFP4, NVFP4
from eaglequant.numerics import fp8, mxfp4, nvfp4


def stored_layouts(weight: torch.Tensor) -> dict[str, StoredLinear]:
    """``weight`` quantized into each layout the kernels read, by the vendors' math."""
    q, scale = fp8.quark_per_channel(weight)
    ct_q, ct_scale = fp8.compressed_tensors_per_channel(weight)
    global_scale = nvfp4.modelopt_global_scale(weight.float().abs().max())
    packed, block = nvfp4.modelopt_quantize(weight, global_scale)
    ct_global = nvfp4.compressed_tensors_global_scale(weight.float().abs().max(), weight.dtype)
    ct_packed, ct_block = nvfp4.compressed_tensors_quantize(weight, ct_global)
    mx_packed, mx_scale = mxfp4.quark_quantize(weight)
    return {
        "fp8-w8a16": StoredLinear(FP8_CHANNEL, q, channel_scale=scale),
        "fp8-w8a8": StoredLinear(FP8_CHANNEL, q, channel_scale=scale, activation_kind=FP8_TOKEN),
        "fp8-w8a8-ct": StoredLinear(
            FP8_CHANNEL, ct_q, channel_scale=ct_scale.float().reshape(-1), activation_kind=FP8_TOKEN
        ),
        "nvfp4-modelopt": StoredLinear(NVFP4, packed, block_scale=block, global_scale=global_scale),
        "nvfp4-ct": StoredLinear(NVFP4, ct_packed, block_scale=ct_block, global_scale=1 / ct_global.reshape(())),
        "mxfp4": StoredLinear(MXFP4, mx_packed, block_scale=mx_scale),
    }
