"""What a quantization kind is: how one tensor's quantized form is shaped and read back, whatever a format
calls its tensors.

A scheme reduces to a weight kind and an activation kind (or None: weight-only). Formats store a kind with
a *recipe* of their own (names, dtypes, the vendor's rounding); kernels and verification read every kind
through :class:`StoredLinear` (below), whose tensors each kind gives a meaning.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from eaglequant.common.errors import SchemeError
from eaglequant.common.findings import Finding

if TYPE_CHECKING:
    import torch

BITS = {"fp8_e4m3": 8, "fp4_e2m1": 4}
BlockSize = int | tuple[int, int] | None


@dataclass(frozen=True)
class TensorKind:
    """The declarative part a scheme file names: element dtype, granularity and scale encoding."""

    name: str
    dtype: str
    granularity: str
    block_size: BlockSize
    scale_dtype: str
    global_scale: bool
    summary: str

    @property
    def bits(self) -> int:
        return BITS[self.dtype]

    def describe(self) -> str:
        block = f", block_size {_block_text(self.block_size)}" if self.block_size else ""
        return (
            f"{self.dtype}/{self.granularity}{block}/scale {self.scale_dtype}{' + global' if self.global_scale else ''}"
        )


def _block_text(block_size: BlockSize) -> str:
    return "x".join(map(str, block_size)) if isinstance(block_size, tuple) else str(block_size)


class KernelLayout(IntEnum):
    """How the Triton kernel reads a weight kind's stored tensors (its compile-time specialisation)."""

    FP8_ROWS = 0  # E4M3 codes, a scale per output channel
    NVFP4 = 1  # packed E2M1 codes, an E4M3 scale per 16, a float32 global scale
    MXFP4 = 2  # packed E2M1 codes, an E8M0 scale per 32
    FP8_BLOCKS = 3  # E4M3 codes, a float32 scale per 128x128 block
    INT8_ROWS = 4  # int8 codes, a scale per output channel
    INT4_GROUPS = 5  # eight 4-bit codes per int32, a scale (and zero point) per group


class ActivationCodes(IntEnum):
    """The codes the Triton kernel rounds simulated activations to."""

    NONE = 0  # not simulated: the weight-only kernel
    FP8 = 1
    INT8 = 2


@dataclass(frozen=True)
class ActivationKind(TensorKind):
    """How activations are quantized at run time. ``simulated``: the kernels quantize inputs as the engine
    does (:meth:`simulate`); otherwise parity runs the weight-only kernel."""

    simulated: ClassVar[bool] = False
    kernel_codes: ClassVar[ActivationCodes] = ActivationCodes.FP8  # what the Triton kernel rounds simulated inputs to
    min_scale: float = 0.0  # the engine's floor on a dynamic scale

    def simulate(self, x: torch.Tensor) -> torch.Tensor | None:
        """float32 activations as the engine's kernel quantizes them, or None when the reference kernel does
        not simulate this kind (verify then runs the weight-only kernel and says so)."""
        return None


@dataclass(frozen=True)
class WeightKind(TensorKind, ABC):
    """How a weight is stored and dequantized.

    ``stored_dtype``: the safetensors dtype of the stored weight; ``codes_per_element``: logical values per
    stored element (2 for packed FP4); ``rows_per_scale``: output rows sharing one scale (a block of rows
    must be quantized whole); ``columns_per_scale``: in-features sharing one scale (None: the whole row), which
    must divide the in-dimension unless the format pads it; ``activations``: the activation kinds the
    engines' kernels pair with it; ``tag``: the Hub tag of a checkpoint in this kind.
    """

    activations: tuple[str, ...] = ()
    stored_dtype: str = "F8_E4M3"
    codes_per_element: int = 1
    rows_per_scale: int = 1
    columns_per_scale: int | None = None
    tag: str = ""
    kernel_layout: ClassVar[KernelLayout]  # which specialisation of the Triton kernel reads it

    def shape_problem(self, out_features: int, in_features: int, fused_before_last: bool) -> Finding | None:
        """Why a linear of this shape cannot be stored in this kind (None: it can), before any format's own
        padding: ``fused_before_last``: an engine fuses it with the linears after it, so its scale rows are
        concatenated with theirs (``fused-rows-unaligned``). The finding is about no subject: the caller knows the
        linear."""
        if self.rows_per_scale > 1 and fused_before_last and out_features % self.rows_per_scale:
            text = (
                f"out-features {out_features} is not a multiple of {self.rows_per_scale}, and engines concatenate "
                f"a fused module's {self.rows_per_scale}-row scale blocks (vLLM: load_merged_column_weight)"
            )
            return Finding("fused-rows-unaligned", "", text)
        return None

    def in_features(self, stored_columns: int) -> int:
        return stored_columns * self.codes_per_element

    @abstractmethod
    def dequantize_rows(self, stored: StoredLinear, rows: slice) -> torch.Tensor:
        """float32 [rows, K]: exactly what the kernels compute from the stored bytes of those rows."""

    def select_rows(self, stored: StoredLinear, rows: slice) -> StoredLinear:
        """The linear restricted to output ``rows`` (aligned to ``rows_per_scale``), as a linear of its own."""

        def part(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[rows]

        return replace(
            stored,
            weight=stored.weight[rows],
            channel_scale=part(stored.channel_scale),
            block_scale=part(stored.block_scale),
            zero_point=part(stored.zero_point),
        )


# The registries, filled by ``eaglequant.kinds`` (its ``__init__`` lists every kind).
WEIGHT_KINDS: dict[str, WeightKind] = {}
ACTIVATION_KINDS: dict[str, ActivationKind] = {}


def weight_kind(name: str) -> WeightKind:
    try:
        return WEIGHT_KINDS[name]
    except KeyError:
        raise SchemeError(f"unknown weight kind {name!r}", hint=f"known: {', '.join(WEIGHT_KINDS)}") from None


def activation_kind(name: str | None) -> ActivationKind | None:
    if name is None:
        return None
    try:
        return ACTIVATION_KINDS[name]
    except KeyError:
        raise SchemeError(f"unknown activation kind {name!r}", hint=f"known: {', '.join(ACTIVATION_KINDS)}") from None


class KindPair(NamedTuple):
    """What a scheme reduces to, by registered name, as configs declare it: the weight kind and the activation
    kind (None: weight-only). Equal to, and hashed as, the plain ``(weight, activation)`` tuple."""

    weight: str
    activation: str | None

    @property
    def weight_kind(self) -> WeightKind:
        return weight_kind(self.weight)

    @property
    def activation_kind(self) -> ActivationKind | None:
        return activation_kind(self.activation)

    def __str__(self) -> str:
        return str(tuple(self))  # messages name the pair as configs declare it


# StoredLinear's tensor fields, each a tensor or None (a kind stores the ones it uses).
STORED_TENSOR_FIELDS = ("weight", "channel_scale", "block_scale", "global_scale", "zero_point")


@dataclass(frozen=True)
class StoredLinear:
    """``kind``: the weight kind (see its class for the tensors it uses): ``weight`` as stored;
    ``channel_scale`` float32 [N]; ``block_scale`` per block (as the kind stores it); ``global_scale``
    float32 0-dim, multiplied into the output; ``zero_point`` per block (as the kind reads it), subtracted from the
    codes before they are scaled (asymmetric kinds).

    ``activation``: the activation kind the engine quantizes inputs with at run time (None: activations stay
    in their dtype, or the kind is not simulated).
    """

    weight_kind: WeightKind
    weight: torch.Tensor
    channel_scale: torch.Tensor | None = None
    block_scale: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None
    activation_kind: ActivationKind | None = None
    zero_point: torch.Tensor | None = None

    @property
    def tensors(self) -> dict[str, torch.Tensor | None]:
        """The stored tensors by field name (:data:`STORED_TENSOR_FIELDS`)."""
        return {name: getattr(self, name) for name in STORED_TENSOR_FIELDS}

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return self.weight_kind.in_features(int(self.weight.shape[1]))

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K], exactly what the kernels compute from the stored bytes."""
        return self.dequantize_rows(slice(None))

    def dequantize_rows(self, rows: slice) -> torch.Tensor:
        """float32 [rows, K] of :meth:`dequantize`, reading only those rows."""
        return self.weight_kind.dequantize_rows(self, rows)

    def rows(self, rows: slice) -> StoredLinear:
        """The linear restricted to output rows ``rows`` (a linear of its own); ``rows`` must start on a scale
        block (:attr:`WeightKind.rows_per_scale`)."""
        return self.weight_kind.select_rows(self, rows)

    def to(self, device: torch.device | str) -> StoredLinear:
        moved = {name: None if t is None else t.to(device) for name, t in self.tensors.items()}
        return replace(self, **moved)  # type: ignore[arg-type]
