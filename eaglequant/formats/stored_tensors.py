"""How a recipe declares the tensors a quantized linear is stored as: each once, with its name suffix, dtype, shape
(from the linear's shape and the weight kind's block geometry) and what a kernel reads it as. The recipe's tensor
specs, the names of its vendor math's outputs and the stored linear a kernel reads are all derived from these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from eaglequant.kinds.base import WeightKind
    from eaglequant.layouts.head import HeadLinear

Shape = Callable[[int, int, "WeightKind"], tuple[int, ...]]  # (out-features N, in-features K, kind) -> shape
Read = Callable[["torch.Tensor", int], "torch.Tensor"]  # (tensor as stored, N) -> what the kernel reads


class DtypeOf(Enum):
    """A stored dtype that is not the format's own choice."""

    KIND = "the weight kind's stored dtype"
    LINEAR = "the source linear's dtype"


def _columns(kind: WeightKind) -> int:
    assert kind.columns_per_scale is not None, f"{kind.name} has no scale groups along the in-dimension"
    return kind.columns_per_scale


def stored_weight_shape(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    """[N, K / values per element]: the weight as stored."""
    return (n, k // kind.codes_per_element)


def per_row(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    return (n,)


def per_row_as_column(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    return (n, 1)


def per_group(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    """[N, K / group]: one per row per group of in-features."""
    return (n, k // _columns(kind))


def per_row_block_group(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    """[ceil(N / rows per block), K / group]: one per block of rows per group (INT4 zero points, packed by rows)."""
    return (-(-n // kind.rows_per_scale), k // _columns(kind))


def per_block(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    """[ceil(N / block rows), ceil(K / block columns)]: one per 2-D block, a last partial block included."""
    return (-(-n // kind.rows_per_scale), -(-k // _columns(kind)))


def scalar(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    return ()


def single(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    return (1,)


def dimensions(n: int, k: int, kind: WeightKind) -> tuple[int, ...]:
    """[2]: the linear's shape itself."""
    return (2,)


class Placement(Enum):
    """What a stored tensor's first dimension runs over, so a block of weight rows is written into its part of it."""

    ROWS = "one entry per weight row"
    ROW_BLOCKS = "one entry per block of rows_per_scale weight rows"
    WHOLE = "a per-tensor value, written whole by the first block of rows"


PLACEMENTS: dict[Shape, Placement] = {
    stored_weight_shape: Placement.ROWS,
    per_row: Placement.ROWS,
    per_row_as_column: Placement.ROWS,
    per_group: Placement.ROWS,
    per_row_block_group: Placement.ROW_BLOCKS,
    per_block: Placement.ROW_BLOCKS,
    scalar: Placement.WHOLE,
    single: Placement.WHOLE,
    dimensions: Placement.WHOLE,
}


def as_stored(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    return tensor


def as_float32(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    import torch

    return tensor.to(torch.float32)


def as_float32_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """[N, 1] in any float dtype -> float32 [N]."""
    import torch

    return tensor.to(torch.float32).reshape(-1)


def as_multiplier(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """compressed-tensors divides by its global scale; engines invert it once at load: float32 0-dim."""
    import torch

    return 1.0 / tensor.to(torch.float32).reshape(())


def unpacked_zero_points(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    from eaglequant.numerics.int4 import unpack_zero_points

    return unpack_zero_points(tensor, rows)


@dataclass(frozen=True)
class StoredTensor:
    """One tensor a quantized linear is stored as, ``<module>.<suffix>``.

    ``feeds``: the :class:`~eaglequant.kinds.base.StoredLinear` field a kernel reads it as (``read`` turns the
    format's convention into the kernel's); None: not read by kernels (a static input scale, metadata).
    ``with_activations``: stored only when the scheme quantizes activations. ``metadata``: not a scale but the
    whole linear's description, the same in every block of rows (compressed-tensors' ``weight_shape``).
    """

    suffix: str
    dtype: str | DtypeOf
    shape: Shape
    feeds: str | None = None
    read: Read = as_stored
    with_activations: bool = False
    metadata: bool = False

    @property
    def placement(self) -> Placement:
        return PLACEMENTS[self.shape]

    def dtype_for(self, linear: HeadLinear, kind: WeightKind) -> str:
        if self.dtype is DtypeOf.KIND:
            return kind.stored_dtype
        if self.dtype is DtypeOf.LINEAR:
            return linear.dtype
        return self.dtype


def weight_codes(suffix: str = "weight") -> StoredTensor:
    """The quantized weight: the kind's codes in its own dtype."""
    return StoredTensor(suffix, DtypeOf.KIND, stored_weight_shape, feeds="weight")
