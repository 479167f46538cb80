"""What every compressed-tensors recipe shares: the QuantizationArgs object as compressed-tensors serialises it,
and the recipe class that carries a kind's ``format`` and args (:mod:`.compressed_tensors` and
:mod:`.compressed_tensors_int` declare the recipes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.formats.base import Recipe
from eaglequant.formats.stored_tensors import DtypeOf, StoredTensor, as_float32_rows, per_row_as_column, weight_codes

if TYPE_CHECKING:
    import torch

    from eaglequant.formats.base import GroupScales
    from eaglequant.layouts.head import HeadLinear
    from eaglequant.schemes.model import Scheme

COMPRESSED_TENSORS_VERSION = "0.19.0"


def ct_args(
    num_bits: int,
    strategy: str,
    *,
    dynamic: bool | str,
    group_size: int | None = None,
    scale_dtype: str | None = None,
    block_structure: list[int] | None = None,
    number_type: str = "float",
    symmetric: bool = True,
) -> dict[str, Any]:
    """QuantizationArgs as compressed-tensors 0.19 serialises them (its key order). ``zp_dtype`` is written only for
    asymmetric args (compressed-tensors' serializer drops it for symmetric ones), as the int8 it infers for INT."""
    return {
        "actorder": None,
        "block_structure": block_structure,
        "dynamic": dynamic,
        "group_size": group_size,
        "num_bits": num_bits,
        "observer": None,
        "observer_kwargs": {},
        "scale_dtype": scale_dtype,
        "strategy": strategy,
        "symmetric": symmetric,
        "type": number_type,
        "zp_dtype": None if symmetric else "torch.int8",
    }


class CtRecipe(Recipe):
    """A compressed-tensors recipe adds the kind's ``format`` and QuantizationArgs (weights; activations
    per activation kind)."""

    compression_format: ClassVar[str]
    weight_args: ClassVar[dict[str, Any]]
    input_args: ClassVar[dict[str, dict[str, Any]]]  # activation kind -> its args


class PerChannelRecipe(CtRecipe):
    """Codes with one scale per output channel, stored [N, 1] in the weight's dtype, and dynamic per-token
    activations: llm-compressor's FP8_DYNAMIC and W8A8 store the same two tensors, differing in the codes' dtype
    and the math that makes them."""

    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale", DtypeOf.LINEAR, per_row_as_column, feeds="channel_scale", read=as_float32_rows),
    )

    def channel_math(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """The vendor's per-channel math: weight -> (codes, [N, 1] scale)."""
        raise NotImplementedError

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        return self.channel_math()(weight)
