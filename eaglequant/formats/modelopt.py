"""NVIDIA ModelOpt format (``quant_method: modelopt``), as ModelOpt 0.47's ``export_hf_checkpoint`` writes it.

- ``FP8_PER_CHANNEL_PER_TOKEN``: ``weight`` F8_E4M3 [N, K], ``weight_scale`` F32 [N]; no input scale.
- ``NVFP4`` (W4A4, calibrated) / ``W4A16_NVFP4``: ``weight`` U8 [N, K/2], ``weight_scale`` F8_E4M3 [N, K/16],
  ``weight_scale_2`` F32 0-dim (= amax / 2688, shared by a fused group), and for NVFP4 ``input_scale``
  F32 0-dim (= activation amax / 2688, shared by a fused group).

Two config files: ``hf_quant_config.json`` in the nested form (TensorRT-LLM prefers it; SGLang's NVFP4
needs its ``group_size``, ``kv_cache_quant_algo`` and ``exclude_modules``) and the flat form in
config.json's ``quantization_config`` (vLLM reads that first, and accepts W4A16_NVFP4 only there).
ModelOpt's export asserts on an in-dimension that is not a multiple of 16, so such linears stay
unquantized. Exclusions are ModelOpt wildcards (``*``), matched by each engine's own rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.common.errors import CheckpointError, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.formats.base import ConfigFiles, Format, GroupScales, Recipe, WrittenConfig
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.formats.stored_tensors import StoredTensor, per_group, per_row, scalar, weight_codes
from eaglequant.kinds import FP8_CHANNEL, NVFP4, KindPair, WeightKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch

MODELOPT_VERSION = "0.47.0"
PRODUCER = {"name": "modelopt", "version": MODELOPT_VERSION}
HF_QUANT_CONFIG = "hf_quant_config.json"
MIXED = "MIXED_PRECISION"  # per-module kinds: quantized_layers names each quantized module's algorithm
_FP4_ARGS = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": NVFP4.columns_per_scale}


class _ModelOptRecipe(Recipe):
    """A ModelOpt recipe adds the kind's ``config_groups`` (flat form) and ``group_size`` (nested form)."""

    group_size: ClassVar[int | None] = None

    def config_groups(self, kinds: KindPair) -> dict[str, Any] | None:
        return None


class _Fp8Channel(_ModelOptRecipe):
    kind: ClassVar[WeightKind] = FP8_CHANNEL
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-token": "FP8_PER_CHANNEL_PER_TOKEN"}
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale", "F32", per_row, feeds="channel_scale"),
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import fp8

        return fp8.modelopt_per_channel(weight)


class _Nvfp4(_ModelOptRecipe):
    kind: ClassVar[WeightKind] = NVFP4
    algorithms: ClassVar[dict[str | None, str]] = {None: "W4A16_NVFP4", "nvfp4": "NVFP4"}
    group_size: ClassVar[int | None] = NVFP4.columns_per_scale
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale", "F8_E4M3", per_group, feeds="block_scale"),
        StoredTensor("weight_scale_2", "F32", scalar, feeds="global_scale"),  # amax / 2688, shared by a fused group
        StoredTensor("input_scale", "F32", scalar, with_activations=True),  # activation amax / 2688, shared too
    )

    def config_groups(self, kinds: KindPair) -> dict[str, Any] | None:
        group: dict[str, Any] = {}
        if kinds.activation is not None:
            group["input_activations"] = dict(_FP4_ARGS)
        group["weights"] = dict(_FP4_ARGS)
        group["targets"] = ["Linear"]
        return {"group_0": group}

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import nvfp4

        assert shared.weight_amax is not None
        if float(shared.weight_amax) == 0:
            # ModelOpt itself writes weight_scale_2 = 0 and NaN block scales here.
            raise CheckpointError(
                f"{linear.weight}: every weight of its group is zero; NVFP4 has no global scale for it",
                hint=words("keep it unquantized with ", suggested("exclude", linear.checkpoint_module)),
            )
        weight_scale_2 = nvfp4.modelopt_global_scale(shared.weight_amax)
        packed, block_scale = nvfp4.modelopt_quantize(weight, weight_scale_2)
        if scheme.activation is None:
            return packed, block_scale, weight_scale_2
        assert shared.input_amax is not None
        return packed, block_scale, weight_scale_2, nvfp4.modelopt_global_scale(shared.input_amax)


class ModelOptFormat(Format):
    name: ClassVar[str] = "modelopt"
    title: ClassVar[str] = "NVIDIA ModelOpt"
    quant_method: ClassVar[str] = "modelopt"
    extra_file_names: ClassVar[tuple[str, ...]] = (HF_QUANT_CONFIG,)
    exclude_key: ClassVar[str] = "ignore"
    exclude_dialect: ClassVar[str] = "wildcard"
    recipes: ClassVar[tuple[Recipe, ...]] = (_Fp8Channel(), _Nvfp4())
    scale_params: ClassVar[tuple[str, ...]] = ("weight_scale", "weight_scale_2", "input_scale")
    per_module_algorithm: ClassVar[str | None] = MIXED

    names_every_module: ClassVar[bool] = True

    def write_config(self, config: QuantConfig) -> ConfigFiles:
        """``export_hf_checkpoint``'s two files: config.json's flat form and hf_quant_config.json's nested one. A
        config with per-module kinds is MIXED_PRECISION: each quantized module's algorithm in ``quantized_layers``,
        keyed by the engine's runtime name (vLLM looks a module up by its exact prefix), the others excluded."""
        exclude = list(config.exclude)
        if config.per_module:
            layers = {name: self._layer_entry(kinds) for name, kinds in sorted(config.module_kinds.items())}
            flat = {
                "ignore": exclude,
                "quant_algo": MIXED,
                "quantized_layers": layers,
                "producer": dict(PRODUCER),
                "quant_method": "modelopt",
            }
            nested: dict[str, Any] = {
                "quant_algo": MIXED,
                "kv_cache_quant_algo": None,
                "exclude_modules": list(exclude),
            }
            nested["quantized_layers"] = {name: dict(entry) for name, entry in layers.items()}
            return ConfigFiles(flat, {HF_QUANT_CONFIG: {"producer": dict(PRODUCER), "quantization": nested}})
        kinds = config.kinds
        recipe = self._recipe(kinds)
        groups = recipe.config_groups(kinds)
        flat = {} if groups is None else {"config_groups": groups}
        flat.update(
            {
                "ignore": exclude,
                "quant_algo": self.algorithms[kinds],
                "producer": dict(PRODUCER),
                "quant_method": "modelopt",
            }
        )
        nested = {"quant_algo": self.algorithms[kinds], "kv_cache_quant_algo": None}
        if recipe.group_size is not None:
            nested["group_size"] = recipe.group_size
        nested["exclude_modules"] = list(exclude)
        return ConfigFiles(flat, {HF_QUANT_CONFIG: {"producer": dict(PRODUCER), "quantization": nested}})

    def matches_target(self, target: str, runtime_name: str) -> bool:
        return target == runtime_name  # ModelOptMixedPrecisionConfig: the exact runtime prefix

    def _recipe(self, kinds: KindPair) -> _ModelOptRecipe:
        recipe = self.recipe(kinds)
        assert isinstance(recipe, _ModelOptRecipe)
        return recipe

    def _layer_entry(self, kinds: KindPair) -> dict[str, Any]:
        group_size = self._recipe(kinds).group_size
        return {"quant_algo": self.algorithms[kinds], **({"group_size": group_size} if group_size else {})}

    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        """config.json's flat form is what vLLM reads; TensorRT-LLM prefers hf_quant_config.json. Both
        must say the same, or the engines disagree about the checkpoint."""
        nested = extra.get(HF_QUANT_CONFIG, {}).get("quantization")
        if MIXED in (quantization_config.get("quant_algo"), (nested or {}).get("quant_algo")):
            return self._read_mixed(quantization_config, nested)
        flat = quantization_config if "quant_algo" in quantization_config else None
        if flat is None and isinstance(nested, dict):
            flat = {"quant_algo": nested.get("quant_algo"), "ignore": nested.get("exclude_modules") or []}
        declared = (flat or quantization_config).get("quant_algo")
        by_algo = {algo: kinds for kinds, algo in self.algorithms.items()}
        if declared not in by_algo:
            raise self.unmodelled(declared)
        config = QuantConfig.flat(by_algo[declared], self.read_exclude(flat or quantization_config))
        written = WrittenConfig(self.name, config)
        if flat is quantization_config and "exclude_modules" in flat and "ignore" not in flat:
            text = (
                "config.json's quantization_config lists exclude_modules but no ignore: vLLM 0.32.0 reads ignore only "
                "and quantizes those modules, 0.33.0 falls back to exclude_modules "
                "(quantization/modelopt.py::from_config); rename the key to ignore, which both read"
            )
            written.problems.append(Finding("exclude-modules-without-ignore", "config.json", text))
        if isinstance(nested, dict):
            for key, flat_key in (("quant_algo", "quant_algo"), ("exclude_modules", "ignore")):
                if nested.get(key) != (flat or {}).get(flat_key):
                    text = (
                        f"{HF_QUANT_CONFIG} has {key} {nested.get(key)!r} but config.json has {flat_key} "
                        f"{(flat or {}).get(flat_key)!r}: TensorRT-LLM reads the first, vLLM the second"
                    )
                    written.problems.append(Finding("configs-disagree", HF_QUANT_CONFIG, text))
        return written

    def _read_mixed(self, flat: dict[str, Any], nested: dict[str, Any] | None) -> WrittenConfig:
        """A MIXED_PRECISION config: each listed module's kinds by its runtime name, and the listed modules."""
        listed = flat.get("quantized_layers") if "quant_algo" in flat else (nested or {}).get("quantized_layers")
        if not isinstance(listed, dict) or not listed:
            raise CheckpointError(
                "config.json: a MIXED_PRECISION quantization_config needs a non-empty quantized_layers map"
            )
        by_algo = {algo: kinds for kinds, algo in self.algorithms.items()}
        module_kinds: dict[str, KindPair] = {}
        for name, entry in listed.items():
            algo = entry.get("quant_algo") if isinstance(entry, dict) else None
            if algo not in by_algo:
                raise CheckpointError(
                    f"config.json: quantized_layers[{name!r}] declares {algo!r}, which eaglequant does not model",
                    hint=f"eaglequant reads {', '.join(sorted(by_algo))}",
                )
            module_kinds[name] = by_algo[algo]
        problems = []
        if isinstance(nested, dict) and nested.get("quantized_layers") != listed:
            text = (
                f"{HF_QUANT_CONFIG} and config.json list different quantized_layers: TensorRT-LLM reads "
                "the first, vLLM the second"
            )
            problems.append(Finding("configs-disagree", HF_QUANT_CONFIG, text))
        source = flat if "quant_algo" in flat else {"ignore": (nested or {}).get("exclude_modules")}
        return WrittenConfig(self.name, QuantConfig.listed(None, module_kinds, self.read_exclude(source)), problems)
