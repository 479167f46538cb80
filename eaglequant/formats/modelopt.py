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

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.errors import CheckpointError
from eaglequant.formats.base import Format, GroupScales, WrittenConfig
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from eaglequant.kernels.stored import StoredLinear

MODELOPT_VERSION = "0.47.0"
PRODUCER = {"name": "modelopt", "version": MODELOPT_VERSION}
HF_QUANT_CONFIG = "hf_quant_config.json"
_FP4_ARGS = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}


class ModelOptFormat(Format):
    name: ClassVar[str] = "modelopt"
    title: ClassVar[str] = "NVIDIA ModelOpt"
    quant_method: ClassVar[str] = "modelopt"
    extra_file_names: ClassVar[tuple[str, ...]] = (HF_QUANT_CONFIG,)
    exclude_key: ClassVar[str] = "ignore"
    algorithms: ClassVar[dict[tuple[str, str | None], str]] = {
        ("fp8-channel", "fp8-token"): "FP8_PER_CHANNEL_PER_TOKEN",
        ("nvfp4", None): "W4A16_NVFP4",
        ("nvfp4", "nvfp4"): "NVFP4",
    }

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        base, n, k = linear.checkpoint_module, linear.out_features, linear.in_features
        if scheme.weight.kind == "fp8-channel":
            return [TensorSpec(f"{base}.weight", "F8_E4M3", (n, k)), TensorSpec(f"{base}.weight_scale", "F32", (n,))]
        specs = [
            TensorSpec(f"{base}.weight", "U8", (n, k // 2)),
            TensorSpec(f"{base}.weight_scale", "F8_E4M3", (n, k // 16)),
            TensorSpec(f"{base}.weight_scale_2", "F32", ()),
        ]
        if scheme.activation is not None:
            specs.append(TensorSpec(f"{base}.input_scale", "F32", ()))
        return specs

    def quantized_tensors(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        from eaglequant.schemes import fp8, nvfp4

        base = linear.checkpoint_module
        if scheme.weight.kind == "fp8-channel":
            quantized, scale = fp8.modelopt_per_channel(weight)
            return {f"{base}.weight": quantized, f"{base}.weight_scale": scale}
        assert shared.weight_amax is not None
        if float(shared.weight_amax) == 0:
            # ModelOpt itself writes weight_scale_2 = 0 and NaN block scales here.
            raise CheckpointError(
                f"{linear.weight}: every weight of its group is zero; NVFP4 has no global scale for it",
                hint=f"keep it unquantized with --exclude {linear.checkpoint_module}",
            )
        weight_scale_2 = nvfp4.modelopt_global_scale(shared.weight_amax)
        packed, block_scale = nvfp4.modelopt_quantize(weight, weight_scale_2)
        tensors = {
            f"{base}.weight": packed,
            f"{base}.weight_scale": block_scale,
            f"{base}.weight_scale_2": weight_scale_2,
        }
        if scheme.activation is not None:
            assert shared.input_amax is not None
            tensors[f"{base}.input_scale"] = nvfp4.modelopt_global_scale(shared.input_amax)
        return tensors

    def quantization_config(self, scheme: Scheme, exclude: list[str]) -> dict[str, Any]:
        """The flat form ModelOpt's export writes into config.json."""
        algorithm = self.algorithm(scheme)
        config: dict[str, Any] = {}
        if scheme.weight.kind == "nvfp4":
            group: dict[str, Any] = {}
            if scheme.activation is not None:
                group["input_activations"] = dict(_FP4_ARGS)
            group["weights"] = dict(_FP4_ARGS)
            group["targets"] = ["Linear"]
            config["config_groups"] = {"group_0": group}
        config.update(
            {"ignore": list(exclude), "quant_algo": algorithm, "producer": dict(PRODUCER), "quant_method": "modelopt"}
        )
        return config

    def extra_files(self, scheme: Scheme, exclude: list[str]) -> dict[str, dict[str, Any]]:
        quantization: dict[str, Any] = {"quant_algo": self.algorithm(scheme), "kv_cache_quant_algo": None}
        if scheme.weight.kind == "nvfp4":
            quantization["group_size"] = 16
        quantization["exclude_modules"] = list(exclude)
        return {HF_QUANT_CONFIG: {"producer": dict(PRODUCER), "quantization": quantization}}

    def stored_linear(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        from eaglequant.kernels.stored import StoredLinear

        base = linear.checkpoint_module
        weight, scale = tensors[f"{base}.weight"], tensors[f"{base}.weight_scale"]
        if scheme.weight.kind == "fp8-channel":
            return StoredLinear("fp8-channel", weight, channel_scale=scale, activation="fp8-token")
        return StoredLinear("nvfp4", weight, block_scale=scale, global_scale=tensors[f"{base}.weight_scale_2"])

    def scheme_fields(self, quantization_config: dict[str, Any]) -> object:
        return quantization_config.get("quant_algo")

    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        """config.json's flat form is what vLLM reads; TensorRT-LLM prefers hf_quant_config.json. Both
        must say the same, or the engines disagree about the checkpoint."""
        nested = extra.get(HF_QUANT_CONFIG, {}).get("quantization")
        flat = quantization_config if "quant_algo" in quantization_config else None
        if flat is None and isinstance(nested, dict):
            flat = {"quant_algo": nested.get("quant_algo"), "ignore": nested.get("exclude_modules") or []}
        written = super().read_config(flat or quantization_config, extra)
        if isinstance(nested, dict):
            for key, flat_key in (("quant_algo", "quant_algo"), ("exclude_modules", "ignore")):
                if nested.get(key) != (flat or {}).get(flat_key):
                    written.problems.append(
                        f"{HF_QUANT_CONFIG} has {key} {nested.get(key)!r} but config.json has {flat_key} "
                        f"{(flat or {}).get(flat_key)!r}: TensorRT-LLM reads the first, vLLM the second"
                    )
        return written
