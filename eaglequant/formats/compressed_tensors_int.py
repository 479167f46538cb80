"""compressed-tensors recipes for the integer kinds, as llm-compressor 0.14's ``model_free_ptq`` writes them
(``W8A8``, ``W4A16``, ``W4A16_ASYM`` presets; compressed-tensors 0.19):

- INT8 W8A8 (``int-quantized``): ``weight`` I8 [N, K], ``weight_scale`` in the weight dtype, [N, 1]; no zero point
  (symmetric); activations INT8 per token at run time.
- INT4 W4A16 (``pack-quantized``): ``weight_packed`` I32 [N, K/8] (eight codes per int32, first in the low nibble),
  ``weight_scale`` in the weight dtype, [N, K/128], ``weight_shape`` I64 [2] = [N, K]; the asymmetric kind adds
  ``weight_zero_point`` I32 [N/8, K/128] (packed along the out-dimension).

compressed-tensors refuses an in-dimension that is not a multiple of 128 for groups of 128, so such linears stay
unquantized (the kind's ``columns_per_scale``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.formats.base import GroupScales
from eaglequant.formats.compressed_tensors_args import CtRecipe, PerChannelRecipe, ct_args
from eaglequant.kinds import INT4_GROUP, INT4_GROUP_ASYM, INT8_CHANNEL, INT8_TOKEN, ActivationKind, WeightKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from eaglequant.kinds.base import StoredLinear


class Int8Channel(PerChannelRecipe):
    kind: ClassVar[WeightKind] = INT8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"int8-token": "W8A8"}
    compression_format: ClassVar[str] = "int-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "channel", dynamic=False, number_type="int")
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "int8-token": ct_args(8, "token", dynamic=True, number_type="int")
    }
    stored_dtype: ClassVar[str] = "I8"
    activation_kind: ClassVar[ActivationKind] = INT8_TOKEN

    def channel_math(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        from eaglequant.numerics import int8

        return int8.compressed_tensors_per_channel


class Int4Group(CtRecipe):
    kind: ClassVar[WeightKind] = INT4_GROUP
    algorithms: ClassVar[dict[str | None, str]] = {None: "W4A16"}
    compression_format: ClassVar[str] = "pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(4, "group", dynamic=False, group_size=128, number_type="int")
    input_args: ClassVar[dict[str, dict[str, Any]]] = {}
    zero_points: ClassVar[bool] = False  # the kind's own flag: asymmetric, a zero point per group
    per_linear_metadata: ClassVar[tuple[str, ...]] = ("weight_shape",)

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        kind = self.kind
        assert kind.columns_per_scale is not None
        specs = [
            TensorSpec(f"{base}.weight_packed", kind.stored_dtype, (n, k // kind.codes_per_element)),
            TensorSpec(f"{base}.weight_scale", linear.dtype, (n, k // kind.columns_per_scale)),  # in the weight's dtype
            TensorSpec(f"{base}.weight_shape", "I64", (2,)),
        ]
        if self.zero_points:  # packed along the out-dimension, eight rows to an int32
            zero_rows = -(-n // (32 // kind.bits))
            specs.append(TensorSpec(f"{base}.weight_zero_point", "I32", (zero_rows, k // kind.columns_per_scale)))
        return specs

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        import torch

        from eaglequant.numerics import int4

        base = linear.checkpoint_module
        packed, scale, zero = int4.compressed_tensors_quantize(weight, symmetric=not self.zero_points)
        tensors = {
            f"{base}.weight_packed": packed,
            f"{base}.weight_scale": scale,
            # the whole linear's shape, whichever block of rows this is
            f"{base}.weight_shape": torch.tensor([linear.out_features, linear.in_features], dtype=torch.int64),
        }
        if zero is not None:
            tensors[f"{base}.weight_zero_point"] = int4.pack_zero_points(zero)
        return tensors

    def stored(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        import torch

        from eaglequant.kinds.base import StoredLinear
        from eaglequant.numerics.int4 import unpack_zero_points

        base = linear.checkpoint_module
        packed = tensors[f"{base}.weight_packed"]
        packed_zero = tensors.get(f"{base}.weight_zero_point")
        zero = None if packed_zero is None else unpack_zero_points(packed_zero, packed.shape[0])
        scale = tensors[f"{base}.weight_scale"].to(torch.float32)
        return StoredLinear(self.kind, packed, block_scale=scale, zero_point=zero)


class Int4GroupAsym(Int4Group):
    kind: ClassVar[WeightKind] = INT4_GROUP_ASYM
    algorithms: ClassVar[dict[str | None, str]] = {None: "W4A16_ASYM"}
    zero_points: ClassVar[bool] = True
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "group", dynamic=False, group_size=128, number_type="int", symmetric=False
    )
