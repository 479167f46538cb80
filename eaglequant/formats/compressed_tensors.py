"""compressed-tensors format (``quant_method: compressed-tensors``), as llm-compressor 0.14's
``model_free_ptq`` writes it with compressed-tensors 0.19.

- FP8 per channel (``float-quantized``, preset FP8_DYNAMIC): ``weight`` F8_E4M3 [N, K], ``weight_scale``
  in the weight dtype, [N, 1].
- NVFP4 (``nvfp4-pack-quantized``, NVFP4A16 / NVFP4): ``weight_packed`` U8 [N, K/2], ``weight_scale``
  F8_E4M3 [N, K/16], ``weight_global_scale`` F32 [1] (= 1 / ModelOpt's weight_scale_2), and for W4A4
  ``input_global_scale`` F32 [1].
- MXFP4 (``mxfp4-pack-quantized``, MXFP4A16 / MXFP4): ``weight_packed`` U8 [N, K/2], ``weight_scale``
  U8 [N, K/32].

An in-dimension that is not a multiple of the block is an error in compressed-tensors, so such
linears stay unquantized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.formats.base import Format, GroupScales
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from eaglequant.kernels.stored import StoredLinear

COMPRESSED_TENSORS_VERSION = "0.19.0"
_FORMATS = {"fp8-channel": "float-quantized", "nvfp4": "nvfp4-pack-quantized", "mxfp4": "mxfp4-pack-quantized"}


def _args(
    num_bits: int, strategy: str, *, dynamic: bool | str, group_size: int | None = None, scale_dtype: str | None = None
) -> dict[str, Any]:
    """QuantizationArgs as compressed-tensors 0.19 serialises them (its key order)."""
    return {
        "actorder": None,
        "block_structure": None,
        "dynamic": dynamic,
        "group_size": group_size,
        "num_bits": num_bits,
        "observer": None,
        "observer_kwargs": {},
        "scale_dtype": scale_dtype,
        "strategy": strategy,
        "symmetric": True,
        "type": "float",
        "zp_dtype": None,
    }


_WEIGHTS = {
    "fp8-channel": _args(8, "channel", dynamic=False),
    "nvfp4": _args(4, "tensor_group", dynamic=False, group_size=16, scale_dtype="torch.float8_e4m3fn"),
    "mxfp4": _args(4, "group", dynamic=False, group_size=32, scale_dtype="torch.uint8"),
}
_ACTIVATIONS = {
    "fp8-token": _args(8, "token", dynamic=True),
    "nvfp4": _args(4, "tensor_group", dynamic="local", group_size=16, scale_dtype="torch.float8_e4m3fn"),
    "mxfp4": _args(4, "group", dynamic=True, group_size=32, scale_dtype="torch.uint8"),
}


class CompressedTensorsFormat(Format):
    name: ClassVar[str] = "compressed-tensors"
    title: ClassVar[str] = "compressed-tensors"
    quant_method: ClassVar[str] = "compressed-tensors"
    exclude_key: ClassVar[str] = "ignore"
    algorithms: ClassVar[dict[tuple[str, str | None], str]] = {
        ("fp8-channel", "fp8-token"): "FP8_DYNAMIC",
        ("nvfp4", None): "NVFP4A16",
        ("nvfp4", "nvfp4"): "NVFP4",
        ("mxfp4", None): "MXFP4A16",
        ("mxfp4", "mxfp4"): "MXFP4",
    }

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        kind = scheme.weight.kind
        if kind == "fp8-channel":
            return [
                TensorSpec(f"{base}.weight", "F8_E4M3", (n, k)),
                TensorSpec(f"{base}.weight_scale", linear.dtype, (n, 1)),  # in the weight's dtype
            ]
        block = scheme.weight.block_size
        assert block is not None
        scale_dtype = "F8_E4M3" if kind == "nvfp4" else "U8"
        specs = [
            TensorSpec(f"{base}.weight_packed", "U8", (n, k // 2)),
            TensorSpec(f"{base}.weight_scale", scale_dtype, (n, k // block)),
        ]
        if kind == "nvfp4":
            specs.append(TensorSpec(f"{base}.weight_global_scale", "F32", (1,)))
            if scheme.activation is not None:
                specs.append(TensorSpec(f"{base}.input_global_scale", "F32", (1,)))
        return specs

    def quantized_tensors(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        from eaglequant.schemes import fp8, mxfp4, nvfp4

        base = linear.checkpoint_module
        kind = scheme.weight.kind
        if kind == "fp8-channel":
            quantized, scale = fp8.compressed_tensors_per_channel(weight)
            return {f"{base}.weight": quantized, f"{base}.weight_scale": scale}
        if kind == "mxfp4":
            packed, scale = mxfp4.compressed_tensors_quantize(weight)
            return {f"{base}.weight_packed": packed, f"{base}.weight_scale": scale}
        assert shared.weight_amax is not None
        global_scale = nvfp4.compressed_tensors_global_scale(shared.weight_amax, weight.dtype)
        packed, block_scale = nvfp4.compressed_tensors_quantize(weight, global_scale)
        tensors = {
            f"{base}.weight_packed": packed,
            f"{base}.weight_scale": block_scale,
            f"{base}.weight_global_scale": global_scale,
        }
        if scheme.activation is not None:
            assert shared.input_amax is not None
            # Activations are bf16 at run time; the calibrated global scale follows the weight rule.
            import torch

            tensors[f"{base}.input_global_scale"] = nvfp4.compressed_tensors_global_scale(
                shared.input_amax, torch.float32
            )
        return tensors

    def quantization_config(self, scheme: Scheme, exclude: list[str]) -> dict[str, Any]:
        algorithm = self.algorithm(scheme)
        assert algorithm is not None
        fmt = _FORMATS[scheme.weight.kind]
        activation = None if scheme.activation is None else dict(_ACTIVATIONS[scheme.activation.kind])
        return {
            "config_groups": {
                algorithm: {
                    "format": fmt,
                    "input_activations": activation,
                    "output_activations": None,
                    "targets": ["Linear"],
                    "weights": dict(_WEIGHTS[scheme.weight.kind]),
                }
            },
            "format": fmt,
            "global_compression_ratio": None,
            "ignore": list(exclude),
            "kv_cache_scheme": None,
            "quant_method": "compressed-tensors",
            "quantization_status": "compressed",
            "transform_config": {},
            "version": COMPRESSED_TENSORS_VERSION,
        }

    def stored_linear(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        import torch

        from eaglequant.kernels.stored import StoredLinear

        base = linear.checkpoint_module
        scale = tensors[f"{base}.weight_scale"]
        if scheme.weight.kind == "fp8-channel":
            channel = scale.to(torch.float32).reshape(-1)  # [N, 1] in the weight's dtype
            return StoredLinear("fp8-channel", tensors[f"{base}.weight"], channel_scale=channel, activation="fp8-token")
        packed = tensors[f"{base}.weight_packed"]
        if scheme.weight.kind == "mxfp4":
            return StoredLinear("mxfp4", packed, block_scale=scale)
        # compressed-tensors divides by its global scale; vLLM inverts it once at load.
        global_scale = 1.0 / tensors[f"{base}.weight_global_scale"].to(torch.float32).reshape(())
        return StoredLinear("nvfp4", packed, block_scale=scale, global_scale=global_scale)

    def scheme_fields(self, quantization_config: dict[str, Any]) -> object:
        groups = quantization_config.get("config_groups")
        if not isinstance(groups, dict) or len(groups) != 1:
            return ("config_groups", len(groups) if isinstance(groups, dict) else None)
        group = next(iter(groups.values()))
        if not isinstance(group, dict):
            return ("config_groups", None)
        return (
            group.get("format", quantization_config.get("format")),
            group.get("targets"),
            _args_fields(group.get("weights")),
            _args_fields(group.get("input_activations")),
        )


_ARGS_KEYS = ("num_bits", "type", "strategy", "group_size", "dynamic", "symmetric")


def _args_fields(args: object) -> tuple[object, ...] | None:
    return tuple(args.get(key) for key in _ARGS_KEYS) if isinstance(args, dict) else None
