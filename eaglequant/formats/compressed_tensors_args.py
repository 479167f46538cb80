"""What every compressed-tensors recipe shares: the QuantizationArgs object as compressed-tensors serialises it,
and the recipe class that carries a kind's ``format`` and args (:mod:`.compressed_tensors` and
:mod:`.compressed_tensors_int` declare the recipes)."""

from __future__ import annotations

from typing import Any, ClassVar

from eaglequant.formats.base import Recipe

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
