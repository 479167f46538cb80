"""AMD Quark format (``quant_method: quark``), as Quark 0.13's own file-to-file export writes it.

- Per-channel FP8 (``ptpc_fp8``): ``<module>.weight`` F8_E4M3 [N, K] and ``<module>.weight_scale`` F32 [N];
  no ``input_scale`` (activations are dynamic per token). vLLM requires the scale to be 1-D.
- INT8 per channel, dynamic per-token inputs (W8A8): ``weight`` I8 [N, K], ``weight_scale`` F32 [N]
  (see ``_Int8Channel``).
- OCP MXFP4 (``mxfp4`` W4A4 dynamic, ``mxfp4_weight_only``): ``weight`` U8 [N, K/2], ``weight_scale`` U8
  (E8M0) [N, K/32]; both write the same tensors, only ``input_tensors`` in the config differs.

Quark zero-pads an in-dimension that is not a multiple of 32, but vLLM sizes the scale as K // 32 and
rejects the padded tensor, so such linears stay unquantized. Quark's file-to-file NVFP4 writes
per-tensor (unshared) ``weight_scale_2`` and no input scale, which vLLM's Quark NVFP4 (W4A4 only,
``input_scale_2``) cannot load; eaglequant writes NVFP4 as ModelOpt or compressed-tensors instead.
"""

from __future__ import annotations

import copy
import fnmatch
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.common.errors import InputError
from eaglequant.formats.base import ConfigFiles, Format, GroupScales, Recipe, WrittenConfig
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.formats.stored_tensors import StoredTensor, per_group, per_row, weight_codes
from eaglequant.kinds import FP8_CHANNEL, INT8_CHANNEL, MXFP4, KindPair, WeightKind
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

_MXFP4_SPEC: dict[str, Any] = {
    **_FP8_SPEC,
    "dtype": "fp4",
    "qscheme": "per_group",
    "ch_axis": -1,
    "group_size": MXFP4.columns_per_scale,
    "symmetric": None,
    "scale_format": "e8m0",
    "scale_calculation_mode": "even",
    "observer_cls": "PerBlockMXObserver",
}


class _QuarkRecipe(Recipe):
    """A Quark recipe adds the kind's per-tensor specs: ``global_quant_config.weight`` and ``input_tensors``."""

    weight_spec: ClassVar[dict[str, Any]]
    input_spec: ClassVar[dict[str, Any] | None]  # for the activations, when the scheme quantizes them


_PER_CHANNEL = (weight_codes(), StoredTensor("weight_scale", "F32", per_row, feeds="channel_scale"))


class _Fp8Channel(_QuarkRecipe):
    kind: ClassVar[WeightKind] = FP8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-token": "ptpc_fp8"}
    weight_spec: ClassVar[dict[str, Any]] = _FP8_SPEC
    input_spec: ClassVar[dict[str, Any] | None] = {**_FP8_SPEC, "is_dynamic": True, "ch_axis": 1}
    tensors: ClassVar[tuple[StoredTensor, ...]] = _PER_CHANNEL

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import fp8

        return fp8.quark_per_channel(weight)


class _Int8Channel(_QuarkRecipe):
    """INT8 per channel with dynamic per-token inputs: Quark's file-to-file path writes it from a hand-built QConfig
    (``Int8PerChannelSpec`` with ch_axis 0 on weights, dynamic with ch_axis 1 on inputs; no LLMTemplate scheme)."""

    kind: ClassVar[WeightKind] = INT8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"int8-token": "int8 per-channel, dynamic per-token"}
    weight_spec: ClassVar[dict[str, Any]] = {**_FP8_SPEC, "dtype": "int8"}
    input_spec: ClassVar[dict[str, Any] | None] = {**_FP8_SPEC, "dtype": "int8", "is_dynamic": True, "ch_axis": 1}
    tensors: ClassVar[tuple[StoredTensor, ...]] = _PER_CHANNEL

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import int8

        return int8.quark_per_channel(weight)


class _Mxfp4(_QuarkRecipe):
    kind: ClassVar[WeightKind] = MXFP4
    # Both write the same tensors; only input_tensors differs.
    algorithms: ClassVar[dict[str | None, str]] = {"mxfp4": "mxfp4", None: "mxfp4_weight_only"}
    weight_spec: ClassVar[dict[str, Any]] = _MXFP4_SPEC
    input_spec: ClassVar[dict[str, Any] | None] = {**_MXFP4_SPEC, "is_dynamic": True}
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale", "U8", per_group, feeds="block_scale"),  # E8M0 exponents
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import mxfp4

        return mxfp4.quark_quantize(weight)


class QuarkFormat(Format):
    name: ClassVar[str] = "quark"
    title: ClassVar[str] = "AMD Quark"
    quant_method: ClassVar[str] = "quark"
    exclude_key: ClassVar[str] = "exclude"
    exclude_dialect: ClassVar[str] = "exact-or-regex"
    recipes: ClassVar[tuple[Recipe, ...]] = (_Fp8Channel(), _Mxfp4(), _Int8Channel())
    scale_params: ClassVar[tuple[str, ...]] = ("weight_scale", "weight_scale_2", "input_scale", "input_scale_2")

    def write_config(self, config: QuantConfig) -> ConfigFiles:
        """Quark's export: the default group in ``global_quant_config``; a group naming modules puts each module's
        spec in ``layer_quant_config``, keyed by its runtime name (which vLLM and SGLang look up first)."""
        default = config.default
        assert default is not None, "a Quark config always has a global_quant_config"
        layers = {target: self._spec(kinds) for target, kinds in sorted(config.module_kinds.items())}
        return ConfigFiles(
            {
                "global_quant_config": self._spec(default.kinds),
                "exclude": list(config.exclude),
                "algo_config": None,
                "softmax_quant_spec": None,
                "quant_method": "quark",
                "layer_type_quant_config": {},
                "layer_quant_config": layers,
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
        )

    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        if quantization_config.get("layer_type_quant_config"):
            raise self.unmodelled({"layer_type_quant_config": quantization_config["layer_type_quant_config"]})
        default = self._kinds_of(quantization_config.get("global_quant_config"))
        layers = quantization_config.get("layer_quant_config") or {}
        if not isinstance(layers, dict):
            raise InputError("config.json: quantization_config.layer_quant_config must be an object")
        module_kinds = {str(target): self._kinds_of(spec) for target, spec in layers.items()}
        return WrittenConfig(
            self.name, QuantConfig.listed(default, module_kinds, self.read_exclude(quantization_config))
        )

    def matches_target(self, target: str, runtime_name: str) -> bool:
        # QuarkConfig.get_layer_quant_config_from_name: fnmatch for a pattern with '*', else the name inside it
        return fnmatch.fnmatch(runtime_name, target) if "*" in target else runtime_name in target

    def _spec(self, kinds: KindPair) -> dict[str, Any]:
        """A ``global_quant_config`` / ``layer_quant_config`` entry for ``kinds``."""
        recipe = self.recipe(kinds)
        assert isinstance(recipe, _QuarkRecipe)
        return {
            "input_tensors": None if kinds.activation is None else copy.deepcopy(recipe.input_spec),
            "output_tensors": None,
            "weight": copy.deepcopy(recipe.weight_spec),
            "bias": None,
            "target_device": None,
        }

    def _kinds_of(self, spec: object) -> KindPair:
        """The kinds a Quark spec entry declares, read by the fields that decide them."""
        spec = spec if isinstance(spec, dict) else {}
        found = (_spec_fields(spec.get("weight")), _spec_fields(spec.get("input_tensors")))
        for kinds in self.algorithms:
            recipe = self.recipe(kinds)
            assert isinstance(recipe, _QuarkRecipe)
            declared = (_spec_fields(recipe.weight_spec), _spec_fields(recipe.input_spec) if kinds.activation else None)
            if found == declared:
                return kinds
        raise self.unmodelled(found)


_SPEC_KEYS = ("dtype", "qscheme", "ch_axis", "group_size", "scale_format", "is_dynamic")


def _spec_fields(spec: object) -> tuple[object, ...] | None:
    return tuple(spec.get(key) for key in _SPEC_KEYS) if isinstance(spec, dict) else None
