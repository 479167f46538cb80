"""Triton fused dequant-GEMM kernels: y = x @ dequant(W)^T, reading W exactly as the formats store it.

One kernel, specialised at compile time by the weight layout:

- FP8 per-channel: E4M3 weight tile -> bf16 (exact), per-channel scale applied to the output; with
  ``ACT_FP8`` the activations are quantized per token in the kernel (a first pass over K finds each
  row's amax), so W8A8 runs as one launch.
- NVFP4: two E2M1 codes per byte decoded in registers, times the FP8 E4M3 block scale (16 values) —
  exact in bf16 — and the float32 global scale applied to the output.
- MXFP4: the same codes times 2^(E8M0 - 127) per 32 values.
- FP8 block: E4M3 tiles; each K tile lies in one 128-column block, so its float32 block scale (one per 128
  output rows) multiplies the tile's partial product. With per-token-group activations (``ACT_GROUP``), each
  tile's activations are quantized with their group's scale, applied to the same partial product.
- INT8 per-channel: int8 codes (exact in bf16), the per-channel scale applied to the output; with
  ``ACT_CODES == INT8_CODES`` the activations are rounded to INT8 per token in the kernel (scale amax / 127), as the
  engines' W8A8 INT8 kernels do.
- INT4 groups: eight 4-bit codes per int32, unpacked in registers (code = nibble - 8), less the group's zero
  point when there is one (``ZERO_POINT``); each K tile lies in one group of 128, whose float32 scale multiplies the
  tile's partial product (code - zero point is exact in bf16, its product with the scale would not be).

Which specialisation reads a stored linear is its weight kind's ``kernel_layout`` (a :class:`KernelLayout`); how
activations are quantized is its activation kind's (per token, or per token per group; ``kernel_codes``).

Products are accumulated in float32. Divisions that decide a rounding are IEEE ones (``tl.div_rn``), as the reference's
and the engines' are: Triton's ``/`` on float32 is an approximation on NVIDIA GPUs (``div.full.f32``, within 2 ulp),
which the interpreter's exact division would hide; and no multiply-add is fused into an FMA (Triton's default), which
would round a product once less than the reference does before an activation is rounded to a code. Under
``TRITON_INTERPRET=1`` the same kernels run on CPU (tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from eaglequant.kinds.base import ActivationCodes, KernelLayout, StoredLinear
from eaglequant.numerics.limits import E4M3_MAX

# Globals a kernel reads must be constexpr (Triton 3.6 refuses anything else when compiling for a GPU; its
# interpreter does not check).
FP8_MAX = tl.constexpr(E4M3_MAX)
INT8_MAX = tl.constexpr(127.0)
FP8_ROWS = tl.constexpr(int(KernelLayout.FP8_ROWS))
NVFP4 = tl.constexpr(int(KernelLayout.NVFP4))
FP8_BLOCKS = tl.constexpr(int(KernelLayout.FP8_BLOCKS))
INT8_ROWS = tl.constexpr(int(KernelLayout.INT8_ROWS))
INT4_GROUPS = tl.constexpr(int(KernelLayout.INT4_GROUPS))
INT8_CODES = tl.constexpr(int(ActivationCodes.INT8))


@triton.jit
def _e2m1(code):
    """E2M1 code (low 4 bits of an int32) -> float32, built from its bits (exact on every backend): magnitude codes
    2..7 are 2^(e - 1) (1 + m / 2), whose float32 bits are code << 22 plus 126 << 23; codes 0 and 1 are 0 and 0.5."""
    magnitude = code & 7
    bits = tl.where(magnitude >= 2, (magnitude << 22) + (126 << 23), (magnitude & 1) * (126 << 23))  # no overflow
    return (bits | ((code & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _power_of_two(exponent):
    """2^exponent as float32 for integer exponents in [-127, 127], built from its bits (exact)."""
    normal = ((exponent + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(exponent > -127, normal, 5.877471754111438e-39)  # 2^-127 is subnormal


@triton.jit
def _round_to_integer(v):
    """float32 (|v| < 2^22) rounded to the nearest integer, ties to even (as torch.round and the engines' kernels)."""
    magic = 12582912.0  # 1.5 * 2^23
    return (v + magic) - magic


@triton.jit
def _round_to_e4m3(v):
    """Round float32 (|v| <= 448) to the nearest FP8 E4M3 value, ties to even, kept as float32.

    The hardware conversion rounds the same way; doing it in arithmetic keeps the interpreter exact too.
    """
    magnitude = tl.abs(v)
    exponent = tl.maximum(((magnitude.to(tl.int32, bitcast=True) >> 23) & 255) - 127, -6)
    step = _power_of_two(exponent - 3)
    magic = 12582912.0  # 1.5 * 2^23: adding and subtracting it rounds to the nearest even integer
    rounded = ((magnitude * _power_of_two(3 - exponent) + magic) - magic) * step  # times 1 / step: exact
    return tl.where(v < 0, -rounded, rounded)


@triton.jit
def _row_amax(x_ptr, rows, row_ok, K, stride_xm, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Each row's max |x| over all K: a first pass for per-token activation scales."""
    amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :], row_ok[:, None] & (ks[None, :] < K), other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
    return amax


@triton.jit
def _weight_tile(
    w_ptr, block_scale_ptr, zero_point_ptr, cols, col_ok, ks, k0, K, stride_wn, stride_bn,
    KIND: tl.constexpr, ZERO_POINT: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """The weight tile [BLOCK_N, BLOCK_K] as float32 values, before the scales a partial product or the output
    takes (an FP4 tile has its block scales applied here: exact in bf16)."""
    if KIND == FP8_ROWS or KIND == FP8_BLOCKS:  # noqa: SIM109 - jit code compares constexprs, no tuple `in`
        w = tl.load(w_ptr + cols[:, None] * stride_wn + ks[None, :], col_ok[:, None] & (ks[None, :] < K), other=0)
        w = w.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    elif KIND == INT8_ROWS:
        w = tl.load(w_ptr + cols[:, None] * stride_wn + ks[None, :], col_ok[:, None] & (ks[None, :] < K), other=0)
        w = w.to(tl.int8, bitcast=True).to(tl.float32)
    elif KIND == INT4_GROUPS:
        word = k0 // 8 + tl.arange(0, BLOCK_K // 8)  # each int32 read once, its eight nibbles unpacked by shifts
        words = tl.load(
            w_ptr + cols[:, None] * stride_wn + word[None, :], col_ok[:, None] & (word[None, :] < K // 8), other=0
        )
        nibbles = (words[:, :, None] >> (tl.arange(0, 8) * 4)[None, None, :]) & 15
        w = (tl.reshape(nibbles, (BLOCK_N, BLOCK_K)) - 8).to(tl.float32)
        if ZERO_POINT:
            zero = tl.load(zero_point_ptr + cols * stride_bn + k0 // GROUP, col_ok, other=0)
            w = w - zero.to(tl.float32)[:, None]
    else:  # NVFP4, MXFP4
        half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        packed = tl.load(
            w_ptr + cols[:, None] * stride_wn + half[None, :], col_ok[:, None] & (half[None, :] < K // 2), other=0
        )
        packed = packed.to(tl.int32)
        w = tl.reshape(tl.join(_e2m1(packed & 15), _e2m1(packed >> 4)), (BLOCK_N, BLOCK_K))
        groups = k0 // GROUP + tl.arange(0, BLOCK_K // GROUP)
        scale = tl.load(
            block_scale_ptr + cols[:, None] * stride_bn + groups[None, :],
            col_ok[:, None] & (groups[None, :] < K // GROUP),
            other=0,
        )
        if KIND == NVFP4:
            scale = scale.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            scale = _power_of_two(scale.to(tl.int32) - 127)
        w = tl.reshape(tl.reshape(w, (BLOCK_N, BLOCK_K // GROUP, GROUP)) * scale[:, :, None], (BLOCK_N, BLOCK_K))
    return w


# One compiled kernel for every token count: M only bounds the rows, and a decode batch changes it every step (Triton
# would otherwise compile once for M = 1, once for multiples of 16 and once for the rest).
@triton.jit(do_not_specialize=["M"])
def _dequant_gemm(
    x_ptr, w_ptr, block_scale_ptr, channel_scale_ptr, zero_point_ptr, global_scale_ptr, y_ptr, M, N, K,
    stride_xm, stride_wn, stride_bn, stride_ym, stride_ysplit, k_per_split, min_act_scale,
    KIND: tl.constexpr, ACT_FP8: tl.constexpr, ACT_CODES: tl.constexpr, ACT_GROUP: tl.constexpr,
    ZERO_POINT: tl.constexpr, GROUP: tl.constexpr, DOT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)  # split-K: this program's share of K, its partial sum written to y's slice pid_k
    k_start = pid_k * k_per_split
    k_end = tl.minimum(K, k_start + k_per_split)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    if ACT_FP8 and ACT_GROUP == 0:
        amax = _row_amax(x_ptr, rows, row_ok, K, stride_xm, BLOCK_M, BLOCK_K)
        if ACT_CODES == INT8_CODES:
            token_amax = tl.maximum(amax, min_act_scale * INT8_MAX)
            token_scale = tl.div_rn(token_amax, tl.full((BLOCK_M,), INT8_MAX, tl.float32))
        else:
            token_scale = tl.maximum(tl.div_rn(amax, tl.full((BLOCK_M,), FP8_MAX, tl.float32)), min_act_scale)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :], row_ok[:, None] & (ks[None, :] < K), other=0.0)
        if ACT_FP8 and ACT_GROUP > 0:
            group_start = (k0 // ACT_GROUP) * ACT_GROUP
            group_cols = group_start + tl.arange(0, ACT_GROUP)
            group_x = tl.load(
                x_ptr + rows[:, None] * stride_xm + group_cols[None, :],
                row_ok[:, None] & (group_cols[None, :] < K),
                other=0.0,
            )
            group_amax = tl.max(tl.abs(group_x.to(tl.float32)), axis=1)
            token_scale = tl.maximum(tl.div_rn(group_amax, tl.full((BLOCK_M,), FP8_MAX, tl.float32)), min_act_scale)
        if ACT_FP8 and ACT_CODES == INT8_CODES:
            inverse = tl.div_rn(tl.full((BLOCK_M,), INT8_MAX, tl.float32), token_amax)  # as the engines multiply
            x = tl.clamp(_round_to_integer(x.to(tl.float32) * inverse[:, None]), -INT8_MAX - 1.0, INT8_MAX)
        elif ACT_FP8:
            scaled = tl.div_rn(x.to(tl.float32), tl.broadcast_to(token_scale[:, None], (BLOCK_M, BLOCK_K)))
            x = _round_to_e4m3(tl.clamp(scaled, -FP8_MAX, FP8_MAX))
        w = _weight_tile(
            w_ptr, block_scale_ptr, zero_point_ptr, cols, col_ok, ks, k0, K, stride_wn, stride_bn,
            KIND, ZERO_POINT, GROUP, BLOCK_N, BLOCK_K,
        )  # fmt: skip
        if DOT_BF16:
            partial = tl.dot(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)))
        else:  # the interpreter has no bf16 arithmetic; the operands are exact in bf16 either way
            partial = tl.dot(x.to(tl.float32), tl.trans(w), input_precision="ieee")
        if KIND == FP8_BLOCKS:
            block_scale = tl.load(block_scale_ptr + (cols // GROUP) * stride_bn + k0 // GROUP, col_ok, other=0.0)
            partial = partial * block_scale[None, :]
        if KIND == INT4_GROUPS:
            partial = partial * tl.load(block_scale_ptr + cols * stride_bn + k0 // GROUP, col_ok, other=0.0)[None, :]
        if ACT_FP8 and ACT_GROUP > 0:
            partial = partial * token_scale[:, None]
        acc += partial
    if KIND == FP8_ROWS or KIND == INT8_ROWS:  # noqa: SIM109 - as above
        acc = acc * tl.load(channel_scale_ptr + cols, col_ok, other=0.0)[None, :]
    if KIND == NVFP4:
        acc = acc * tl.load(global_scale_ptr)
    if ACT_FP8 and ACT_GROUP == 0:
        acc = acc * token_scale[:, None]
    y_ptr += pid_k * stride_ysplit
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], acc, row_ok[:, None] & col_ok[None, :])


@dataclass(frozen=True)
class LaunchConfig:
    """How a launch tiles the GEMM: tile sizes, K split over ``split_k`` programs (their float32 partial sums added
    afterwards), and Triton's warps and pipeline stages. ``block_k`` is capped at a layout's scale group where a tile
    must lie in one group (FP8 blocks, INT4 groups: 128)."""

    block_m: int = 16
    block_n: int = 64
    block_k: int = 64
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        if self.block_m < 16:
            raise ValueError(f"block_m {self.block_m}: tl.dot takes at least 16 rows")

    def label(self) -> str:
        return (
            f"m{self.block_m} n{self.block_n} k{self.block_k} split{self.split_k} w{self.num_warps} s{self.num_stages}"
        )


# At decode sizes (M <= 16: one row of tiles), by what a tile reads: the launch least slow over the Kimi-K2.5 head's
# five shapes in the launch sweep on an H200 (docs/performance.md: on average within 6% of each shape's fastest; the
# FP8 block W8A8 kernel was not timed there and takes the other W8A8 kernels' launch).
_DECODE_LAUNCH = {
    "quantizes activations": LaunchConfig(block_n=128, block_k=128, split_k=4, num_warps=8),
    "8-bit weights": LaunchConfig(block_n=64, block_k=128, split_k=4),
    "FP4 weights": LaunchConfig(block_n=64, block_k=128, split_k=8),
    "INT4 weights": LaunchConfig(block_n=64, block_k=64, split_k=8),
}


def default_config(m: int, layout: KernelLayout, quantizes_activations: bool) -> LaunchConfig:
    """The launch for ``m`` tokens through a weight of ``layout`` (see :data:`_DECODE_LAUNCH`); above 16 tokens,
    the first launch (16 x 64 tiles, K walked by one program), which the sweep did not time."""
    if m > 16:
        return LaunchConfig(block_m=16, block_n=64, block_k=64, split_k=1)
    if quantizes_activations:
        return _DECODE_LAUNCH["quantizes activations"]
    if layout in (KernelLayout.NVFP4, KernelLayout.MXFP4):
        return _DECODE_LAUNCH["FP4 weights"]
    return _DECODE_LAUNCH["INT4 weights" if layout == KernelLayout.INT4_GROUPS else "8-bit weights"]


_ONE_TILE_PER_GROUP = (KernelLayout.FP8_BLOCKS, KernelLayout.INT4_GROUPS)


def _block_k(config: LaunchConfig, layout: KernelLayout, group: int, k: int) -> int:
    """The K tile: the config's, within one scale group where the layout needs it, and 32 where K is not a multiple of
    64 (a tile must hold whole FP4 scale blocks)."""
    block_k = config.block_k
    if layout in _ONE_TILE_PER_GROUP:
        block_k = min(block_k, group)
    if k % 64 and group != 1:
        block_k = 32
    return block_k


def triton_linear(x: torch.Tensor, stored: StoredLinear, config: LaunchConfig | None = None) -> torch.Tensor:
    """y [M, N] float32 = x [M, K] (bf16 or float32) through the fused dequant-GEMM kernel, launched as ``config``
    says (:func:`default_config` when not given)."""
    m, k = x.shape
    n = stored.out_features
    if k != stored.in_features:
        raise ValueError(f"x has {k} features, the weight {stored.in_features}")
    kind, activation = stored.weight_kind, stored.activation_kind
    group = kind.columns_per_scale or 1  # 1: a whole row shares the scale
    act_fp8 = activation is not None and activation.simulated
    config = config or default_config(m, kind.kernel_layout, act_fp8)
    block_k = _block_k(config, kind.kernel_layout, group, k)
    act_group = activation.block_size if activation is not None and isinstance(activation.block_size, int) else 0
    x = x.contiguous()
    # FP8 and INT8 bytes are reinterpreted in the kernel; packed INT4 is read as the int32 words it is stored in
    weight = stored.weight if stored.weight.element_size() > 1 else stored.weight.view(torch.uint8)
    k_tiles = triton.cdiv(k, block_k)
    k_per_split = triton.cdiv(k_tiles, max(1, config.split_k)) * block_k
    splits = triton.cdiv(k, k_per_split)
    y = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
    dummy = torch.empty(1, dtype=torch.float32, device=x.device)
    block_scale = dummy
    if stored.block_scale is not None:  # float32 scales are read as they are, FP8 and E8M0 bytes reinterpreted
        float_scale = stored.block_scale.dtype == torch.float32
        block_scale = stored.block_scale.contiguous() if float_scale else stored.block_scale.view(torch.uint8)
    channel_scale = stored.channel_scale if stored.channel_scale is not None else dummy
    zero_point = stored.zero_point.contiguous() if stored.zero_point is not None else dummy
    # read by the kernel where it lies: float() would wait for the device at every call
    global_scale = dummy if stored.global_scale is None else stored.global_scale.to(x.device, torch.float32)
    grid = (triton.cdiv(m, config.block_m), triton.cdiv(n, config.block_n), splits)
    _dequant_gemm[grid](
        x,
        weight,
        block_scale,
        channel_scale,
        zero_point,
        global_scale,
        y,
        m,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        block_scale.stride(0) if block_scale.dim() == 2 else 0,
        y.stride(1),
        y.stride(0),
        k_per_split,
        0.0 if activation is None else activation.min_scale,
        KIND=int(kind.kernel_layout),
        ACT_FP8=act_fp8,
        ACT_CODES=int(activation.kernel_codes if act_fp8 and activation is not None else ActivationCodes.NONE),
        ACT_GROUP=act_group,
        ZERO_POINT=stored.zero_point is not None,
        GROUP=group,
        DOT_BF16=os.environ.get("TRITON_INTERPRET") != "1",  # the interpreter has no bf16 arithmetic
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=block_k,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        enable_fp_fusion=False,  # x * (127 / amax) + the rounding constant must not become one FMA: two roundings
    )
    return y[0] if splits == 1 else y.sum(0)
