"""vLLM set up for a CPU machine: GPU-kernel selection patches, the synthesized target the draft is
configured against, and the one-rank distributed group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import free_port

# ---------------------------------------------------------------------------------------------
# Patches: only GPU-kernel *selection* is redirected; every one is listed in the output.
# ---------------------------------------------------------------------------------------------


def apply_patches() -> list[str]:
    """Point GPU-kernel selection at vLLM's CPU and emulation kernels; what was patched, in words."""
    patches = []
    from vllm.model_executor.kernels.linear import (
        EmulationMxfp4LinearKernel,
        EmulationNvFp4LinearKernel,
        register_linear_kernel,
    )
    from vllm.model_executor.kernels.linear.nvfp4.marlin import MarlinNvFp4LinearKernel
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    platform_cls = type(current_platform)
    platform_cls.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(9, 0))
    patches.append(
        "current_platform.get_device_capability -> (9, 0): the quantization configs' minimum-capability"
        " checks pass on CPU (FP8 then selects vLLM's CPU scaled-mm kernel)"
    )
    # vLLM lists no NVFP4 / MXFP4 linear kernel for PlatformEnum.CPU; its emulation kernels are pure torch.
    register_linear_kernel(EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")
    register_linear_kernel(EmulationMxfp4LinearKernel, PlatformEnum.CPU, "mxfp4")
    patches.append(
        "register_linear_kernel(EmulationNvFp4LinearKernel / EmulationMxfp4LinearKernel, PlatformEnum.CPU):"
        " NVFP4 W4A4 and MXFP4 layers select vLLM's own emulation kernels on CPU"
    )
    # W4A16 NVFP4 only accepts weight-only kernels (Marlin on SM90); emulation is not one of them.
    MarlinNvFp4LinearKernel.is_supported = classmethod(lambda cls, compute_capability=None: (True, None))
    register_linear_kernel(MarlinNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")
    patches.append(
        "MarlinNvFp4LinearKernel.is_supported -> True, registered for PlatformEnum.CPU after emulation:"
        " NVFP4 W4A16 selects Marlin as on Hopper, so the"
        " layer is created and loaded; Marlin's repack/GEMM are CUDA-only, so its gemm only notes the failure"
    )
    patches.append(_add_block_fp8_emulation())
    patches.append(_add_wna16_emulation())
    return patches


def _add_block_fp8_emulation() -> str:
    """vLLM's CPU block-FP8 kernels need AMX tiles; a pure-torch one goes after them in the CPU list."""
    from vllm.model_executor.kernels.linear import _POSSIBLE_FP8_BLOCK_KERNELS
    from vllm.model_executor.kernels.linear.scaled_mm.BlockScaledMMLinearKernel import Fp8BlockScaledMMLinearKernel
    from vllm.platforms import PlatformEnum

    class EmulationFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
        """The base class quantizes activations with vLLM's own QuantFP8 (1 x 128 groups); A and B are then
        dequantized with their scales and multiplied in float32."""

        @classmethod
        def is_supported(cls, compute_capability: Any = None) -> tuple[bool, str | None]:
            return True, None

        def apply_block_scaled_mm(self, A: Any, B: Any, As: Any, Bs: Any) -> Any:
            rows, cols = self.weight_group_shape.row, self.weight_group_shape.col
            m, k = A.shape
            n = B.shape[0]
            a = A.float() * As.float().reshape(m, -1).repeat_interleave(cols, 1)[:, :k]
            b = B.float() * Bs.float().repeat_interleave(rows, 0)[:n].repeat_interleave(cols, 1)[:, :k]
            return a @ b.T

    _POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CPU].append(EmulationFp8BlockScaledMMKernel)
    return (
        "EmulationFp8BlockScaledMMKernel (pure torch) appended to _POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CPU]"
        " after the AMX kernels: block-FP8 layers are created on a CPU without AMX; activations are quantized by"
        " vLLM's QuantFP8 (1 x 128 groups), then the dequantized operands are multiplied in float32"
    )


def _add_wna16_emulation() -> str:
    """vLLM's CPU INT4 kernel (CPUWNA16) needs out- and in-features in multiples of 32 (an MLA draft's fused q_a +
    kv_a has 64 + 48 rows); a pure-torch one goes after it in the CPU list, as CUDA falls back to Triton W4A16."""
    import torch
    from vllm.model_executor.kernels.linear import _POSSIBLE_KERNELS
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearKernel
    from vllm.platforms import PlatformEnum
    from vllm.scalar_type import scalar_types

    class EmulationWNA16LinearKernel(MPLinearKernel):
        """Reads compressed-tensors' layout as loaded: ``weight_packed`` int32 [N, K/8] (element 8j + i in bits 4i ..
        4i + 3 of word j), ``weight_scale`` [N, K/group], ``weight_zero_point`` int32 [N/8, K/group] packed along N;
        w = (nibble - zero nibble, or - 8 without zero points) * scale, multiplied in float32."""

        @classmethod
        def get_min_capability(cls) -> int:
            return -1

        @classmethod
        def can_implement(cls, c: Any) -> tuple[bool, str | None]:
            if c.weight_type not in (scalar_types.uint4, scalar_types.uint4b8):
                return False, f"{c.weight_type} is not a 4-bit type"
            return True, None

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            pass  # the checkpoint's layout is what apply_weights reads

        def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
            packed, scale, zero = self._get_weight_params(layer)
            shifts = torch.arange(0, 32, 4, dtype=torch.int32)
            nibbles = ((packed.data[..., None] >> shifts) & 15).reshape(packed.shape[0], -1).float()
            n, k = nibbles.shape
            group = k // scale.shape[1]
            if zero is None:
                offsets = torch.full(scale.shape, 8.0)
            else:
                zero_nibbles = (zero.data.T.contiguous()[..., None] >> shifts) & 15
                offsets = zero_nibbles.reshape(zero.shape[1], -1)[:, :n].T.float()
            weight = (nibbles.view(n, -1, group) - offsets[..., None]) * scale.data.float()[..., None]
            out = x.float() @ weight.view(n, k).T
            return (out if bias is None else out + bias.float()).to(x.dtype)

    _POSSIBLE_KERNELS[PlatformEnum.CPU].append(EmulationWNA16LinearKernel)
    return (
        "EmulationWNA16LinearKernel (pure torch) appended to _POSSIBLE_KERNELS[PlatformEnum.CPU] after CPUWNA16: "
        "INT4 layers whose shapes CPUWNA16 refuses (multiples of 32) are created; the compressed-tensors tensors "
        "as loaded are dequantized and multiplied in float32"
    )


# ---------------------------------------------------------------------------------------------
# Target config synthesis
# ---------------------------------------------------------------------------------------------


def is_mla(draft: dict[str, Any]) -> bool:
    draft = {**draft.get("transformer_layer_config", {}), **draft}
    return "kv_lora_rank" in draft or any("Deepseek" in a for a in draft.get("architectures", []))


def write_target(directory: Path, draft: dict[str, Any], target_layers: int) -> None:
    draft = {**draft.get("transformer_layer_config", {}), **draft}  # speculators keeps the shape there
    hidden = int(draft.get("target_hidden_size") or draft["hidden_size"])
    common: dict[str, Any] = {
        "hidden_size": hidden,
        "num_hidden_layers": target_layers,
        "vocab_size": int(draft["vocab_size"]),
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    if is_mla(draft):
        config = {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "intermediate_size": int(draft.get("intermediate_size", 4 * hidden)),
            "moe_intermediate_size": int(draft.get("intermediate_size", 4 * hidden)),
            "num_attention_heads": int(draft["num_attention_heads"]),
            "num_key_value_heads": int(draft["num_attention_heads"]),
            "q_lora_rank": draft.get("q_lora_rank"),
            "kv_lora_rank": int(draft["kv_lora_rank"]),
            "qk_nope_head_dim": int(draft["qk_nope_head_dim"]),
            "qk_rope_head_dim": int(draft["qk_rope_head_dim"]),
            "v_head_dim": int(draft["v_head_dim"]),
            "n_routed_experts": 8,
            "n_shared_experts": 1,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": target_layers,
            "rms_norm_eps": float(draft.get("rms_norm_eps", 1e-6)),
            "rope_theta": float(draft.get("rope_theta", 10000.0)),
            **common,
        }
    else:
        heads = int(draft.get("num_attention_heads", 4))
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "intermediate_size": int(draft.get("intermediate_size", 4 * hidden)),
            "num_attention_heads": heads,
            "num_key_value_heads": int(draft.get("num_key_value_heads", heads)),
            "head_dim": int(draft.get("head_dim", hidden // heads)),
            "rms_norm_eps": float(draft.get("rms_norm_eps", 1e-6)),
            **common,
        }
    (directory / "config.json").write_text(json.dumps(config, indent=1))


_DISTRIBUTED_READY = False


def ensure_distributed(vllm_config: Any) -> None:
    global _DISTRIBUTED_READY
    if _DISTRIBUTED_READY:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    port = free_port()
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            local_rank=0,
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)
    _DISTRIBUTED_READY = True
