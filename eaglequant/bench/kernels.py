"""Timing the fused dequant-GEMM kernels on the Kimi-K2.5 EAGLE-3 head's shapes.

Every kernel is timed next to, in the same run, torch's bf16 matmul and ``torch._scaled_mm`` with
row-wise FP8 scales (the engines' FP8 baseline), and the device's measured copy bandwidth, so the
figures are ratios taken under the same conditions. Weights are random bytes in each stored layout:
only the time matters here (correctness is the tests' and ``verify``'s job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from eaglequant.common.json_fields import JsonRecord
from eaglequant.kernels import StoredLinear, fused_linear
from eaglequant.kinds import ACTIVATION_KINDS, WEIGHT_KINDS, KindPair

H = 7168
# (name, N, K) as the engines run them: fused q/k/v and gate/up (Llama layout, 64 heads x 128, I = 12288).
KIMI_SHAPES = [
    ("qkv_proj", 3 * 64 * 128, 2 * H),
    ("o_proj", H, 64 * 128),
    ("gate_up_proj", 2 * 12288, H),
    ("down_proj", H, 12288),
    ("fc", H, 3 * H),
]
TINY_SHAPES = [("tiny", 256, 512)]
M_VALUES = (1, 4, 16, 64, 256, 2048)
# Kernel name -> (weight kind, activation kind) it runs.
KERNELS: dict[str, KindPair] = {
    "fp8-w8a16": KindPair("fp8-channel", None),
    "fp8-w8a8": KindPair("fp8-channel", "fp8-token"),
    "fp8-block-w8a8": KindPair("fp8-block", "fp8-group"),
    "nvfp4-w4a16": KindPair("nvfp4", None),
    "mxfp4-w4a16": KindPair("mxfp4", None),
    "fp8-block-w8a16": KindPair("fp8-block", None),
    "int8-w8a16": KindPair("int8-channel", None),
    "int8-w8a8": KindPair("int8-channel", "int8-token"),
    "int4-w4a16": KindPair("int4-group", None),
    "int4-asym-w4a16": KindPair("int4-group-asym", None),
}
Timer = Callable[[Callable[[], object]], float]


def _bound(fn: Callable[..., object], *args: object) -> Callable[[], object]:
    return lambda: fn(*args)


@dataclass(frozen=True)
class Timing:
    shape: str
    m: int
    n: int
    k: int
    kernel: str
    backend: str
    milliseconds: float
    weight_bytes: int
    bf16_milliseconds: float  # torch's bf16 matmul at the same shape and M, timed in the same run

    @property
    def tflops(self) -> float:
        return 2 * self.m * self.n * self.k / (self.milliseconds * 1e-3) / 1e12

    @property
    def gigabytes_per_second(self) -> float:
        moved = self.weight_bytes + 2 * self.m * self.k + 4 * self.m * self.n  # weights, bf16 x, float32 y
        return moved / (self.milliseconds * 1e-3) / 1e9

    @property
    def speedup_vs_bf16(self) -> float:
        return self.bf16_milliseconds / self.milliseconds

    def percent_of_copy_bandwidth(self, copy_gbps: float) -> float:
        return 100 * self.gigabytes_per_second / copy_gbps

    def row(self, copy_gbps: float) -> KernelRow:
        """The timing as ``bench kernels`` records it, against a copy bandwidth of ``copy_gbps``."""
        return KernelRow(
            *(self.shape, self.m, self.n, self.k, self.kernel, self.backend, self.milliseconds, self.tflops),
            *(self.gigabytes_per_second, self.percent_of_copy_bandwidth(copy_gbps), self.speedup_vs_bf16),
        )


@dataclass(frozen=True)
class KernelRow(JsonRecord):
    """One timing as ``bench kernels`` records it (:meth:`Timing.row`): the shape and kernel, its milliseconds and
    what they come to (TFLOP/s, GB/s, the share of the copy bandwidth, the speed-up over bf16)."""

    shape: str
    m: int
    n: int
    k: int
    kernel: str
    backend: str
    ms: float
    tflops: float
    gbps: float
    percent_of_copy_bandwidth: float
    speedup_vs_bf16: float


@dataclass(frozen=True)
class KernelBench(JsonRecord):
    """``bench kernels``: every timing's row, and the device's copy bandwidth they are compared with."""

    device: str
    copy_gbps: float
    rows: tuple[KernelRow, ...]

    @classmethod
    def of(cls, device: str, copy_gbps: float, timings: Sequence[Timing]) -> KernelBench:
        return cls(device, copy_gbps, tuple(timing.row(copy_gbps) for timing in timings))


def registered_kernel_pairs() -> set[KindPair]:
    """Every (weight kind, activation kind) the Triton kernel has a specialisation for: each registered weight kind
    weight-only, and with each activation kind engines pair it with that the kernel quantizes (``simulated``; the
    others run the weight-only kernel)."""
    pairs = set()
    for kind in WEIGHT_KINDS.values():
        pairs.add(KindPair(kind.name, None))
        pairs.update(KindPair(kind.name, act) for act in kind.activations if ACTIVATION_KINDS[act].simulated)
    return pairs


def random_stored(kernel: str, n: int, k: int, device: str, generator: torch.Generator) -> StoredLinear:
    """Random stored tensors of ``kernel``'s weight kind (shapes as its class documents)."""
    return random_stored_kinds(KERNELS[kernel], n, k, device, generator)


def random_stored_kinds(kinds: KindPair, n: int, k: int, device: str, generator: torch.Generator) -> StoredLinear:
    """Random stored tensors of ``kinds``' weight kind, made on ``generator``'s device (a CUDA generator makes a
    full-size head's in milliseconds) and moved to ``device``: any bytes each kind can store, scales near one."""
    made = generator.device

    def ints(low: int, high: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.randint(low, high, shape, dtype=dtype, generator=generator, device=made).to(device)

    def fp8(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator, device=made) * 0.05).to(torch.float8_e4m3fn).to(device)

    def scales(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=generator, device=made) + 0.5).to(device)

    def int4(zero: bool) -> dict[str, torch.Tensor]:
        made_ = {"weight": ints(-(2**31), 2**31, (n, k // 8), torch.int32), "block_scale": scales(n, k // 128) * 1e-2}
        return made_ | ({"zero_point": ints(-8, 8, (n, k // 128), torch.int8)} if zero else {})

    builders: dict[str, Callable[[], dict[str, torch.Tensor]]] = {
        "fp8-channel": lambda: {"weight": fp8(n, k), "channel_scale": scales(n)},
        "fp8-block": lambda: {"weight": fp8(n, k), "block_scale": scales(-(-n // 128), -(-k // 128))},
        "nvfp4": lambda: {
            "weight": ints(0, 256, (n, k // 2), torch.uint8),
            "block_scale": (torch.rand(n, k // 16, generator=generator, device=made) + 0.1)
            .to(torch.float8_e4m3fn)
            .to(device),
            "global_scale": torch.tensor(1e-3, device=device),  # the kernel reads it where it lies
        },
        "mxfp4": lambda: {
            "weight": ints(0, 256, (n, k // 2), torch.uint8),
            "block_scale": ints(118, 128, (n, k // 32), torch.uint8),
        },
        "int8-channel": lambda: {"weight": ints(-127, 128, (n, k), torch.int8), "channel_scale": scales(n) * 1e-3},
        "int4-group": lambda: int4(zero=False),
        "int4-group-asym": lambda: int4(zero=True),
    }
    return StoredLinear(kinds.weight_kind, activation_kind=kinds.activation_kind, **builders[kinds.weight]())


def _stored_bytes(stored: StoredLinear) -> int:
    tensors = [stored.weight, stored.channel_scale, stored.block_scale, stored.zero_point]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _timer(device: str) -> Timer:
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=25, rep=100))

    def cpu_time(fn: Callable[[], object]) -> float:
        fn()
        runs, started = 0, time.perf_counter()
        while runs < 3 or time.perf_counter() - started < 0.05:
            fn()
            runs += 1
        return (time.perf_counter() - started) / runs * 1e3

    return cpu_time


def copy_bandwidth(device: str, timer: Timer) -> float:
    """GB/s of a device-to-device copy of 1 GiB (64 MiB on CPU): read plus write."""
    size = (1 << 30) if device == "cuda" else (64 << 20)
    source = torch.empty(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    milliseconds = timer(lambda: target.copy_(source))
    return 2 * size / (milliseconds * 1e-3) / 1e9


def bench_kernels(
    device: str, m_values: tuple[int, ...] = M_VALUES, shapes: list[tuple[str, int, int]] | None = None
) -> KernelBench:
    timer = _timer(device)
    generator = torch.Generator(device=device).manual_seed(0)  # made where they run: seconds less a shape on a GPU
    copy_gbps = copy_bandwidth(device, timer)
    rows: list[Timing] = []
    for name, n, k in shapes or KIMI_SHAPES:
        dense = (torch.randn(n, k, generator=generator, device=device) * 0.05).to(torch.bfloat16)
        stored = {kind: random_stored(kind, n, k, device, generator) for kind in KERNELS}
        for m in m_values:
            x = torch.randn(m, k, generator=generator, device=device).to(torch.bfloat16)
            bf16_ms = timer(_bound(torch.matmul, x, dense.T))
            timings = [Timing(name, m, n, k, "torch-bf16", "torch", bf16_ms, dense.numel() * 2, bf16_ms)]
            scaled = _scaled_mm_timing(name, m, n, k, x, stored["fp8-w8a8"], timer, bf16_ms)
            if scaled is not None:
                timings.append(scaled)
            backend = "triton" if device == "cuda" else "reference"
            for kind in KERNELS:
                ms = timer(_bound(fused_linear, x, stored[kind], backend))
                timings.append(Timing(name, m, n, k, kind, backend, ms, _stored_bytes(stored[kind]), bf16_ms))
            rows += timings
    described = torch.cuda.get_device_name() if device == "cuda" else "cpu (torch reference, not the kernels)"
    return KernelBench.of(described, copy_gbps, rows)


def _scaled_mm_timing(
    name: str,
    m: int,
    n: int,
    k: int,
    x: torch.Tensor,
    stored: StoredLinear,
    timer: Timer,
    bf16_ms: float,
) -> Timing | None:
    """torch._scaled_mm with row-wise scales, activations quantized per token first (as engines do)."""
    if not x.is_cuda:
        return None
    from eaglequant.kernels.reference import quantize_tokens_fp8

    assert stored.channel_scale is not None
    weight_t = stored.weight.T  # column-major, as _scaled_mm wants its second operand
    scale_w = stored.channel_scale.reshape(1, -1).float()

    def run() -> torch.Tensor:
        codes, scale_x = quantize_tokens_fp8(x)
        return torch._scaled_mm(
            codes, weight_t, scale_a=scale_x.reshape(-1, 1), scale_b=scale_w, out_dtype=torch.bfloat16
        )

    try:
        ms = timer(run)
    except RuntimeError:  # no FP8 tensor cores (pre-Hopper / Ada)
        return None
    return Timing(name, m, n, k, "torch-scaled-mm-fp8", "torch", ms, _stored_bytes(stored), bf16_ms)
