"""compressed-tensors format (``quant_method: compressed-tensors``), as llm-compressor 0.14's
``model_free_ptq`` writes it with compressed-tensors 0.19.

- FP8 per channel (``float-quantized``, preset FP8_DYNAMIC): ``weight`` F8_E4M3 [N, K], ``weight_scale``
  in the weight dtype, [N, 1].
- FP8 block (``float-quantized``, preset FP8_BLOCK): ``weight`` F8_E4M3 [N, K], ``weight_scale`` in the weight
  dtype, [ceil(N/128), ceil(K/128)]; activations FP8 per token per group of 128 at run time.
- NVFP4 (``nvfp4-pack-quantized``, NVFP4A16 / NVFP4): ``weight_packed`` U8 [N, K/2], ``weight_scale``
  F8_E4M3 [N, K/16], ``weight_global_scale`` F32 [1] (= 1 / ModelOpt's weight_scale_2), and for W4A4
  ``input_global_scale`` F32 [1].
- MXFP4 (``mxfp4-pack-quantized``, MXFP4A16 / MXFP4): ``weight_packed`` U8 [N, K/2], ``weight_scale``
  U8 [N, K/32].
- INT8 W8A8 (``int-quantized``) and INT4 W4A16 (``pack-quantized``, symmetric or with zero points): their recipes
  are in :mod:`.compressed_tensors_int`.

An in-dimension that is not a multiple of the block is an error in compressed-tensors, so such
linears stay unquantized.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.formats.base import Format, GroupScales, Recipe
from eaglequant.formats.compressed_tensors_args import COMPRESSED_TENSORS_VERSION, CtRecipe, PerChannelRecipe, ct_args
from eaglequant.formats.compressed_tensors_int import Int4Group, Int4GroupAsym, Int8Channel
from eaglequant.kinds import FP8_BLOCK, FP8_CHANNEL, FP8_GROUP, FP8_TOKEN, MXFP4, NVFP4, ActivationKind, WeightKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from eaglequant.kinds.base import StoredLinear


class _Fp8Channel(PerChannelRecipe):
    kind: ClassVar[WeightKind] = FP8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-token": "FP8_DYNAMIC"}
    compression_format: ClassVar[str] = "float-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "channel", dynamic=False)
    input_args: ClassVar[dict[str, dict[str, Any]]] = {"fp8-token": ct_args(8, "token", dynamic=True)}
    stored_dtype: ClassVar[str] = "F8_E4M3"
    activation_kind: ClassVar[ActivationKind] = FP8_TOKEN

    def channel_math(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        from eaglequant.numerics import fp8

        return fp8.compressed_tensors_per_channel


class _Fp8Block(CtRecipe):
    kind: ClassVar[WeightKind] = FP8_BLOCK
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-group": "FP8_BLOCK"}
    compression_format: ClassVar[str] = "float-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "block", dynamic=False, block_structure=[128, 128])
    input_args: ClassVar[dict[str, dict[str, Any]]] = {"fp8-group": ct_args(8, "group", dynamic=True, group_size=128)}

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        return [
            TensorSpec(f"{base}.weight", "F8_E4M3", (n, k)),
            TensorSpec(f"{base}.weight_scale", linear.dtype, (-(-n // 128), -(-k // 128))),  # in the weight's dtype
        ]

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        from eaglequant.numerics import fp8_block

        quantized, scale = fp8_block.compressed_tensors_quantize(weight)
        return {f"{linear.checkpoint_module}.weight": quantized, f"{linear.checkpoint_module}.weight_scale": scale}

    def stored(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        import torch

        from eaglequant.kinds.base import StoredLinear

        base = linear.checkpoint_module
        scale = tensors[f"{base}.weight_scale"].to(torch.float32)
        return StoredLinear(self.kind, tensors[f"{base}.weight"], block_scale=scale, activation=FP8_GROUP)


class _Nvfp4(CtRecipe):
    kind: ClassVar[WeightKind] = NVFP4
    algorithms: ClassVar[dict[str | None, str]] = {None: "NVFP4A16", "nvfp4": "NVFP4"}
    compression_format: ClassVar[str] = "nvfp4-pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "tensor_group", dynamic=False, group_size=16, scale_dtype="torch.float8_e4m3fn"
    )
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "nvfp4": ct_args(4, "tensor_group", dynamic="local", group_size=16, scale_dtype="torch.float8_e4m3fn")
    }

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        specs = [
            TensorSpec(f"{base}.weight_packed", "U8", (n, k // 2)),
            TensorSpec(f"{base}.weight_scale", "F8_E4M3", (n, k // 16)),
            TensorSpec(f"{base}.weight_global_scale", "F32", (1,)),
        ]
        if scheme.activation is not None:
            specs.append(TensorSpec(f"{base}.input_global_scale", "F32", (1,)))
        return specs

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        import torch

        from eaglequant.numerics import nvfp4

        base = linear.checkpoint_module
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
            tensors[f"{base}.input_global_scale"] = nvfp4.compressed_tensors_global_scale(
                shared.input_amax, torch.float32
            )
        return tensors

    def stored(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        import torch

        from eaglequant.kinds.base import StoredLinear

        base = linear.checkpoint_module
        # compressed-tensors divides by its global scale; vLLM inverts it once at load.
        global_scale = 1.0 / tensors[f"{base}.weight_global_scale"].to(torch.float32).reshape(())
        return StoredLinear(
            self.kind,
            tensors[f"{base}.weight_packed"],
            block_scale=tensors[f"{base}.weight_scale"],
            global_scale=global_scale,
        )


class _Mxfp4(CtRecipe):
    kind: ClassVar[WeightKind] = MXFP4
    algorithms: ClassVar[dict[str | None, str]] = {None: "MXFP4A16", "mxfp4": "MXFP4"}
    compression_format: ClassVar[str] = "mxfp4-pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(4, "group", dynamic=False, group_size=32, scale_dtype="torch.uint8")
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "mxfp4": ct_args(4, "group", dynamic=True, group_size=32, scale_dtype="torch.uint8")
    }

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        return [
            TensorSpec(f"{base}.weight_packed", "U8", (n, k // 2)),
            TensorSpec(f"{base}.weight_scale", "U8", (n, k // 32)),
        ]

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        from eaglequant.numerics import mxfp4

        packed, scale = mxfp4.compressed_tensors_quantize(weight)
        return {f"{linear.checkpoint_module}.weight_packed": packed, f"{linear.checkpoint_module}.weight_scale": scale}

    def stored(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        from eaglequant.kinds.base import StoredLinear

        base = linear.checkpoint_module
        return StoredLinear(self.kind, tensors[f"{base}.weight_packed"], block_scale=tensors[f"{base}.weight_scale"])


class CompressedTensorsFormat(Format):
    name: ClassVar[str] = "compressed-tensors"
    title: ClassVar[str] = "compressed-tensors"
    quant_method: ClassVar[str] = "compressed-tensors"
    exclude_key: ClassVar[str] = "ignore"
    exclude_dialect: ClassVar[str] = "exact-or-regex"
    recipes: ClassVar[tuple[Recipe, ...]] = (
        _Fp8Channel(),
        _Fp8Block(),
        _Nvfp4(),
        _Mxfp4(),
        Int8Channel(),
        Int4Group(),
        Int4GroupAsym(),
    )
    scale_params: ClassVar[tuple[str, ...]] = (
        "weight_scale",
        "weight_global_scale",
        "weight_zero_point",
        "weight_shape",
        "input_scale",
        "input_global_scale",
        "input_zero_point",
    )
    weight_params: ClassVar[tuple[str, ...]] = ("weight", "weight_packed")

    def quantization_config(self, scheme: Scheme, exclude: list[str]) -> dict[str, Any]:
        recipe = self.recipe(scheme)
        assert isinstance(recipe, CtRecipe)
        algorithm = recipe.algorithms[scheme.kinds.activation]
        fmt = recipe.compression_format
        activation = None if scheme.activation is None else dict(recipe.input_args[scheme.activation.kind])
        return {
            "config_groups": {
                algorithm: {
                    "format": fmt,
                    "input_activations": activation,
                    "output_activations": None,
                    "targets": ["Linear"],
                    "weights": dict(recipe.weight_args),
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
