"""AMD Quark format (``quant_method: quark``), as Quark 0.13's own export writes it.

Per-channel FP8 (``ptpc_fp8``): ``<module>.weight`` F8_E4M3 [N, K] and ``<module>.weight_scale`` F32 [N];
no ``input_scale`` (activations are dynamic per token). vLLM requires the scale to be 1-D.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.formats.base import Format, GroupScales, QuantizedLinear, error_stats
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch

QUARK_VERSION = "0.13"

# The per-tensor spec keys Quark serialises, in its order (from Quark's own config.json export).
_FP8_SPEC: dict[str, Any] = {
    "dtype": "fp8_e4m3",
    "is_dynamic": False,
    "qscheme": "per_channel",
    "ch_axis": 0,
    "group_size": None,
    "block_size": None,
    "symmetric": True,
    "round_method": "half_even",
    "scale_type": "float",
    "zero_point_type": "int32",
    "scale_format": None,
    "scale_calculation_mode": None,
    "mx_element_dtype": None,
    "observer_cls": "PerChannelMinMaxObserver",
    "is_scale_quant": False,
    "enable_buffer_reuse": False,
    "max_input_numel": 4194304,
}


class QuarkFormat(Format):
    name: ClassVar[str] = "quark"
    title: ClassVar[str] = "AMD Quark"
    exclude_key: ClassVar[str] = "exclude"
    algorithms: ClassVar[dict[tuple[str, str | None], str]] = {("fp8-channel", "fp8-token"): "ptpc_fp8"}

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base = linear.checkpoint_module
        return [
            TensorSpec(f"{base}.weight", "F8_E4M3", (linear.out_features, linear.in_features)),
            TensorSpec(f"{base}.weight_scale", "F32", (linear.out_features,)),
        ]

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> QuantizedLinear:
        from eaglequant.schemes import fp8

        quantized, scale = fp8.quark_per_channel(weight)
        rel, sqnr = error_stats(weight, fp8.dequantize_rows(quantized, scale))
        base = linear.checkpoint_module
        return QuantizedLinear({f"{base}.weight": quantized, f"{base}.weight_scale": scale}, rel, sqnr)

    def quantization_config(self, scheme: Scheme, exclude: list[str]) -> dict[str, Any]:
        weight = copy.deepcopy(_FP8_SPEC)
        activation = None
        if scheme.activation is not None:
            activation = {**copy.deepcopy(_FP8_SPEC), "is_dynamic": True, "ch_axis": 1}
        return {
            "global_quant_config": {
                "input_tensors": activation,
                "output_tensors": None,
                "weight": weight,
                "bias": None,
                "target_device": None,
            },
            "exclude": list(exclude),
            "algo_config": None,
            "softmax_quant_spec": None,
            "quant_method": "quark",
            "layer_type_quant_config": {},
            "layer_quant_config": {},
            "kv_cache_quant_config": {},
            "kv_cache_post_rope": False,
            "quant_mode": "eager_mode",
            "version": QUARK_VERSION,
            "export": {
                "kv_cache_group": [],
                "min_kv_scale": 0.0,
                "pack_method": "reorder",
                "weight_format": "real_quantized",
                "weight_merge_groups": None,
            },
        }
