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

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.formats.base import ConfigFiles, Format, GroupScales, Recipe, WrittenConfig
from eaglequant.formats.compressed_tensors_args import COMPRESSED_TENSORS_VERSION, CtRecipe, PerChannelRecipe, ct_args
from eaglequant.formats.compressed_tensors_int import Int4Group, Int4GroupAsym, Int8Channel
from eaglequant.formats.quant_config import ConfigGroup, QuantConfig
from eaglequant.formats.stored_tensors import (
    DtypeOf,
    StoredTensor,
    as_float32,
    as_multiplier,
    per_block,
    per_group,
    single,
    weight_codes,
)
from eaglequant.kinds import FP8_BLOCK, FP8_CHANNEL, MXFP4, NVFP4, KindPair, WeightKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch


MIXED_PRECISION = "mixed-precision"  # the top-level format of groups in different formats (CompressionFormat)


class _Fp8Channel(PerChannelRecipe):
    kind: ClassVar[WeightKind] = FP8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-token": "FP8_DYNAMIC"}
    compression_format: ClassVar[str] = "float-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "channel", dynamic=False)
    input_args: ClassVar[dict[str, dict[str, Any]]] = {"fp8-token": ct_args(8, "token", dynamic=True)}

    def channel_math(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        from eaglequant.numerics import fp8

        return fp8.compressed_tensors_per_channel


class _Fp8Block(CtRecipe):
    kind: ClassVar[WeightKind] = FP8_BLOCK
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-group": "FP8_BLOCK"}
    compression_format: ClassVar[str] = "float-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(8, "block", dynamic=False, block_structure=[FP8_BLOCK.block] * 2)
    # engines quantize the activations per token in groups of the weight block's columns
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "fp8-group": ct_args(8, "group", dynamic=True, group_size=FP8_BLOCK.block)
    }
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale", DtypeOf.LINEAR, per_block, feeds="block_scale", read=as_float32),
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import fp8_block

        return fp8_block.compressed_tensors_quantize(weight)


class _Nvfp4(CtRecipe):
    kind: ClassVar[WeightKind] = NVFP4
    algorithms: ClassVar[dict[str | None, str]] = {None: "NVFP4A16", "nvfp4": "NVFP4"}
    compression_format: ClassVar[str] = "nvfp4-pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "tensor_group", dynamic=False, group_size=NVFP4.columns_per_scale, scale_dtype="torch.float8_e4m3fn"
    )
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "nvfp4": ct_args(
            4, "tensor_group", dynamic="local", group_size=NVFP4.columns_per_scale, scale_dtype="torch.float8_e4m3fn"
        )
    }
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes("weight_packed"),
        StoredTensor("weight_scale", "F8_E4M3", per_group, feeds="block_scale"),
        StoredTensor("weight_global_scale", "F32", single, feeds="global_scale", read=as_multiplier),
        StoredTensor("input_global_scale", "F32", single, with_activations=True),
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        import torch

        from eaglequant.numerics import nvfp4

        assert shared.weight_amax is not None
        global_scale = nvfp4.compressed_tensors_global_scale(shared.weight_amax, weight.dtype)
        packed, block_scale = nvfp4.compressed_tensors_quantize(weight, global_scale)
        if scheme.activation is None:
            return packed, block_scale, global_scale
        assert shared.input_amax is not None
        # Activations are bf16 at run time; the calibrated global scale follows the weight rule.
        input_global_scale = nvfp4.compressed_tensors_global_scale(shared.input_amax, torch.float32)
        return packed, block_scale, global_scale, input_global_scale


class _Mxfp4(CtRecipe):
    kind: ClassVar[WeightKind] = MXFP4
    algorithms: ClassVar[dict[str | None, str]] = {None: "MXFP4A16", "mxfp4": "MXFP4"}
    compression_format: ClassVar[str] = "mxfp4-pack-quantized"
    weight_args: ClassVar[dict[str, Any]] = ct_args(
        4, "group", dynamic=False, group_size=MXFP4.columns_per_scale, scale_dtype="torch.uint8"
    )
    input_args: ClassVar[dict[str, dict[str, Any]]] = {
        "mxfp4": ct_args(4, "group", dynamic=True, group_size=MXFP4.columns_per_scale, scale_dtype="torch.uint8")
    }
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes("weight_packed"),
        StoredTensor("weight_scale", "U8", per_group, feeds="block_scale"),  # E8M0 exponents
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import mxfp4

        return mxfp4.compressed_tensors_quantize(weight)


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

    def write_config(self, config: QuantConfig) -> ConfigFiles:
        """``model_free_ptq``'s config: one ``config_groups`` entry per group, named by its preset. The default group
        targets the Linear class; a group naming modules lists their runtime names as its targets, which vLLM and
        SGLang match before any class name. Groups in different formats make the top-level format
        ``mixed-precision``, as compressed-tensors writes it."""
        groups = {self._algorithm_of(group.kinds): self._group(group) for group in config.groups}
        formats = {group["format"] for group in groups.values()}
        fmt = formats.pop() if len(formats) == 1 else MIXED_PRECISION
        return ConfigFiles(
            {
                "config_groups": groups,
                "format": fmt,
                "global_compression_ratio": None,
                "ignore": list(config.exclude),
                "kv_cache_scheme": None,
                "quant_method": "compressed-tensors",
                "quantization_status": "compressed",
                "transform_config": {},
                "version": COMPRESSED_TENSORS_VERSION,
            }
        )

    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        groups = quantization_config.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise self.unmodelled(("config_groups", groups))
        default: KindPair | None = None
        module_kinds: dict[str, KindPair] = {}
        for group in groups.values():
            kinds = self._kinds_of(group, quantization_config.get("format"))
            targets = group.get("targets")
            if targets == ["Linear"] and default is None:
                default = kinds
            elif isinstance(targets, list) and targets and "Linear" not in targets:
                module_kinds.update(dict.fromkeys(map(str, targets), kinds))
            else:
                raise self.unmodelled(("targets", targets))
        if default is None:
            raise self.unmodelled(("targets", "no group targets Linear"))
        written = QuantConfig.listed(default, module_kinds, self.read_exclude(quantization_config))
        return WrittenConfig(self.name, written)

    def matches_target(self, target: str, runtime_name: str) -> bool:
        # compressed_tensors/utils.py::find_matched_target: equal, or re: + re.match (class names do not name modules)
        return re.match(target[3:], runtime_name) is not None if target.startswith("re:") else target == runtime_name

    def _group(self, group: ConfigGroup) -> dict[str, Any]:
        kinds = group.kinds
        recipe = self.recipe(kinds)
        assert isinstance(recipe, CtRecipe)
        return {
            "format": recipe.compression_format,
            "input_activations": None if kinds.activation is None else dict(recipe.input_args[kinds.activation]),
            "output_activations": None,
            "targets": list(group.targets) or ["Linear"],
            "weights": dict(recipe.weight_args),
        }

    def _kinds_of(self, group: object, top_format: object) -> KindPair:
        """The kinds a ``config_groups`` entry declares, read by the fields that decide them."""
        group = group if isinstance(group, dict) else {}
        found = (
            group.get("format", top_format),
            _args_fields(group.get("weights")),
            _args_fields(group.get("input_activations")),
        )
        for kinds in self.algorithms:
            recipe = self.recipe(kinds)
            assert isinstance(recipe, CtRecipe)
            inputs = recipe.input_args[kinds.activation] if kinds.activation else None
            if found == (recipe.compression_format, _args_fields(recipe.weight_args), _args_fields(inputs)):
                return kinds
        raise self.unmodelled(found)


_ARGS_KEYS = ("num_bits", "type", "strategy", "group_size", "dynamic", "symmetric")


def _args_fields(args: object) -> tuple[object, ...] | None:
    return tuple(args.get(key) for key in _ARGS_KEYS) if isinstance(args, dict) else None
