"""The engines' native ``fp8`` format (``quant_method: fp8``), as DeepSeek-V3's own checkpoint stores it.

- Block FP8 (``weight_block_size: [128, 128]``, ``activation_scheme: dynamic``): ``weight`` F8_E4M3 [N, K] and
  ``weight_scale_inv`` F32 [ceil(N/128), K/128], a multiplier despite its name (W ~= weight * scale). No input
  scale: activations are quantized per token per group of 128 at run time.

vLLM, SGLang and TensorRT-LLM read this config with their own code; ``fmt`` is informational. Excluded modules
are written under ``modules_to_not_convert``, the one key all three read: vLLM reads ``ignored_layers`` and falls
back to it when that is absent or empty, SGLang reads whichever of the two comes first, TensorRT-LLM main reads
only it. Each engine matches the entries its own way (engines/: exact names in vLLM, dotted-path matches on
shard names in SGLang, globs in TensorRT-LLM), so the list holds every engine's spelling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.common.findings import Finding
from eaglequant.formats.base import ConfigFiles, Format, GroupScales, Recipe, WrittenConfig
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.formats.stored_tensors import StoredTensor, per_block, weight_codes
from eaglequant.kinds import FP8_BLOCK, WeightKind
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    import torch


IGNORED_LAYERS = "ignored_layers"


class _Fp8Block(Recipe):
    kind: ClassVar[WeightKind] = FP8_BLOCK
    algorithms: ClassVar[dict[str | None, str]] = {"fp8-group": "fp8 block [128, 128]"}
    tensors: ClassVar[tuple[StoredTensor, ...]] = (
        weight_codes(),
        StoredTensor("weight_scale_inv", "F32", per_block, feeds="block_scale"),  # a multiplier despite its name
    )

    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        from eaglequant.numerics import fp8_block

        return fp8_block.native_quantize(weight)


class Fp8Format(Format):
    name: ClassVar[str] = "fp8"
    title: ClassVar[str] = "native fp8"
    quant_method: ClassVar[str] = "fp8"
    exclude_key: ClassVar[str] = "modules_to_not_convert"
    exclude_dialect: ClassVar[str] = "fp8-native"
    recipes: ClassVar[tuple[Recipe, ...]] = (_Fp8Block(),)
    scale_params: ClassVar[tuple[str, ...]] = ("weight_scale_inv", "input_scale")

    def write_config(self, config: QuantConfig) -> ConfigFiles:
        block_size = self.recipe(config.kinds).kind.block_size
        assert isinstance(block_size, tuple) and not config.per_module
        return ConfigFiles(
            {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": list(block_size),
                "modules_to_not_convert": list(config.exclude),
            }
        )

    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        """A config that also has ``ignored_layers`` is read differently by each engine: vLLM takes it unless it is
        empty, SGLang whenever it is present, TensorRT-LLM never. The rules are vLLM's; a disagreement is a problem
        (``exclusion-keys-disagree``, about config.json)."""
        found = (
            quantization_config.get("activation_scheme"),
            quantization_config.get("weight_block_size"),
            quantization_config.get("fmt", "e4m3"),
        )
        kinds = next(iter(self.algorithms))
        block_size = self.recipe(kinds).kind.block_size
        assert isinstance(block_size, tuple)
        if found != ("dynamic", list(block_size), "e4m3"):
            raise self.unmodelled(found)
        patterns = self.read_exclude(quantization_config)
        problems = []
        if IGNORED_LAYERS in quantization_config:
            ignored = self.read_exclude(quantization_config, IGNORED_LAYERS)
            if ignored != patterns:
                text = (
                    f"quantization_config has both {IGNORED_LAYERS} {list(ignored)!r} and {self.exclude_key} "
                    f"{list(patterns)!r}: vLLM and SGLang read the first (vLLM only when it is not empty), "
                    "TensorRT-LLM the second"
                )
                problems.append(Finding("exclusion-keys-disagree", "config.json", text))
            patterns = ignored or patterns
        return WrittenConfig(self.name, QuantConfig.flat(kinds, patterns), problems)

    def matches_target(self, target: str, runtime_name: str) -> bool:
        return False  # one kind per checkpoint: no group names a module
