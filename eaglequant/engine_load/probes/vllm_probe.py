"""Load EAGLE-3 draft checkpoints with vLLM's own code and report what each parameter received.

Standalone: runs in a venv holding vllm (see scripts/engines/vllm.sh), never imports eaglequant.

    VENV/bin/python vllm_probe.py JOBS.json

JOBS.json is {"jobs": [{"checkpoint": DIR, "source": DIR | null, "target_layers": N | null}, ...]}.
One JSON object goes to stdout; every log line goes to stderr. Each job is isolated: its failure is
reported in its own result.

Per job: vLLM's EngineArgs builds the config for a synthesized target (LlamaForCausalLM, or a
DeepseekV3ForCausalLM for MLA drafts) with speculative_config method eagle3; the draft is built and
loaded the way the EAGLE proposer does it (EagleProposer._create_draft_vllm_config,
get_draft_load_config, the loader's create_model + load_weights, process_weights_after_loading).
Loading is only observed: the weights iterator and every parameter's weight_loader are wrapped to
record which checkpoint tensor (and shard id) went into which parameter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Checkpoints are local; without these, transformers and vLLM probe the Hub for every config.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch
from safetensors import safe_open

GEMM_TOKENS = 8
GEMM_SEED = 1234
SHARD_ORDER = {"q": 0, "k": 1, "v": 2}

PATCHES: list[str] = []


def _log(message: str) -> None:
    print(f"[vllm_probe] {message}", file=sys.stderr, flush=True)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return f"{type(exc).__name__}: {exc}"
    last = frames[-1]
    return f"{type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})"


# ---------------------------------------------------------------------------------------------
# Patches: only GPU-kernel *selection* is redirected; every one is listed in the output.
# ---------------------------------------------------------------------------------------------


def apply_patches() -> None:
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
    PATCHES.append(
        "current_platform.get_device_capability -> (9, 0): the quantization configs' minimum-capability"
        " checks pass on CPU (FP8 then selects vLLM's CPU scaled-mm kernel)"
    )
    # vLLM lists no NVFP4 / MXFP4 linear kernel for PlatformEnum.CPU; its emulation kernels are pure torch.
    register_linear_kernel(EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")
    register_linear_kernel(EmulationMxfp4LinearKernel, PlatformEnum.CPU, "mxfp4")
    PATCHES.append(
        "register_linear_kernel(EmulationNvFp4LinearKernel / EmulationMxfp4LinearKernel, PlatformEnum.CPU):"
        " NVFP4 W4A4 and MXFP4 layers select vLLM's own emulation kernels on CPU"
    )
    # W4A16 NVFP4 only accepts weight-only kernels (Marlin on SM90); emulation is not one of them.
    MarlinNvFp4LinearKernel.is_supported = classmethod(lambda cls, compute_capability=None: (True, None))
    register_linear_kernel(MarlinNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")
    PATCHES.append(
        "MarlinNvFp4LinearKernel.is_supported -> True, registered for PlatformEnum.CPU after emulation:"
        " NVFP4 W4A16 selects Marlin as on Hopper, so the"
        " layer is created and loaded; Marlin's repack/GEMM are CUDA-only, so its gemm only notes the failure"
    )


# ---------------------------------------------------------------------------------------------
# Checkpoint reading (independent of vLLM)
# ---------------------------------------------------------------------------------------------


class Checkpoint:
    """Tensors of a checkpoint directory: safetensors (single or sharded) or pytorch_model.bin."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._where: dict[str, Path] = {}
        self._bin: dict[str, torch.Tensor] | None = None
        files = sorted(self.directory.glob("*.safetensors"))
        if files:
            for file in files:
                with safe_open(str(file), "pt") as handle:
                    for key in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                        self._where[key] = file
        else:
            bins = sorted(self.directory.glob("*.bin"))
            self._bin = {}
            for file in bins:
                self._bin.update(torch.load(file, map_location="cpu", weights_only=True))

    def keys(self) -> list[str]:
        return list(self._bin) if self._bin is not None else list(self._where)

    def get(self, name: str) -> torch.Tensor:
        if self._bin is not None:
            return self._bin[name]
        with safe_open(str(self._where[name]), "pt") as handle:
            return handle.get_tensor(name)

    def config(self) -> dict[str, Any]:
        return json.loads((self.directory / "config.json").read_text())


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


# ---------------------------------------------------------------------------------------------
# Recording what the loader does
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class LoadCall:
    checkpoint_name: str | None  # None: the loaded tensor could not be traced to a checkpoint tensor
    shard_id: Any
    tensor: torch.Tensor  # what the weight_loader received, kept for untraceable calls


@dataclasses.dataclass
class Recorder:
    by_id: dict[int, str] = dataclasses.field(default_factory=dict)
    by_storage: dict[int, str] = dataclasses.field(default_factory=dict)
    yielded: list[str] = dataclasses.field(default_factory=list)
    keep: list[torch.Tensor] = dataclasses.field(default_factory=list)  # keeps ids unique
    calls: dict[str, list[LoadCall]] = dataclasses.field(default_factory=dict)
    consumed: set[str] = dataclasses.field(default_factory=set)

    def wrap_iterator(self, weights: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            self.yielded.append(name)
            self.keep.append(tensor)
            self.by_id[id(tensor)] = name
            with contextlib.suppress(Exception):
                self.by_storage.setdefault(tensor.untyped_storage().data_ptr(), name)
            yield name, tensor

    def trace(self, tensor: torch.Tensor) -> str | None:
        name = self.by_id.get(id(tensor))
        if name is None:
            with contextlib.suppress(Exception):
                name = self.by_storage.get(tensor.untyped_storage().data_ptr())
        return name

    def wrap_loader(self, param_name: str, loader: Callable[..., Any]) -> Callable[..., Any]:
        def recording_loader(param: torch.nn.Parameter, loaded_weight: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            shard = args[0] if args else kwargs.get("loaded_shard_id", kwargs.get("shard_id"))
            name = self.trace(loaded_weight)
            if name is not None:
                self.consumed.add(name)
            self.calls.setdefault(param_name, []).append(LoadCall(name, shard, loaded_weight.detach().clone()))
            return loader(param, loaded_weight, *args, **kwargs)

        return recording_loader


def instrument_params(model: torch.nn.Module, recorder: Recorder) -> None:
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    for name, param in model.named_parameters():
        # Plain Parameters have no weight_loader; vLLM's loaders then fall back to default_weight_loader,
        # so giving them that same loader (wrapped) changes nothing but lets us see the call.
        original = getattr(param, "weight_loader", None) or default_weight_loader
        param.weight_loader = recorder.wrap_loader(name, original)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Comparing parameters with the checkpoint tensors they were loaded from
# ---------------------------------------------------------------------------------------------


def _shard_key(shard: Any) -> tuple[int, Any]:
    if isinstance(shard, str):
        return (SHARD_ORDER.get(shard, 99), shard)
    if isinstance(shard, int):
        return (shard, shard)
    return (0, shard)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point and a.element_size() == 1:  # fp8: compare the bytes
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


def compare_param(
    param: torch.Tensor,
    calls: list[LoadCall],
    checkpoint: Checkpoint,
    output_dim: int,
    padded_rows: bool = False,
) -> tuple[bool, str | None]:
    if not calls:
        return False, "never loaded: no checkpoint tensor reached this parameter (uninitialised)"
    members: list[tuple[Any, torch.Tensor]] = []
    for call in calls:
        tensor = checkpoint.get(call.checkpoint_name) if call.checkpoint_name is not None else call.tensor
        members.append((call.shard_id, tensor))
    value = param.detach().cpu()
    sharded = any(shard is not None for shard, _ in members)
    if not sharded:
        if len(members) > 1:
            return False, f"{len(members)} tensors loaded into one unsharded parameter"
        expected = members[0][1].to(value.dtype)
        if padded_rows and expected.dim() == value.dim() and expected.shape[1:] == value.shape[1:]:
            value = value[: expected.shape[0]]  # VocabParallelEmbedding pads the vocab to a multiple of 64
        if expected.numel() != value.numel():
            return False, f"shape {list(value.shape)} != checkpoint {list(members[0][1].shape)}"
        if _same(value.reshape(-1), expected.reshape(-1)):
            return True, None
        return False, "values differ from the checkpoint tensor"
    members.sort(key=lambda item: _shard_key(item[0]))
    shards = [shard for shard, _ in members]
    if len(set(map(str, shards))) != len(shards):
        return False, f"shard loaded more than once: {shards}"
    if all(t.numel() == 1 for _, t in members) and value.numel() == len(members):
        expected = torch.stack([t.reshape(()) for _, t in members]).to(value.dtype)  # one element per member
        if _same(value.reshape(-1), expected):
            return True, None
        return False, f"per-shard values {value.reshape(-1).tolist()} != {expected.tolist()}"
    if all(t.numel() == 1 for _, t in members) and value.numel() == 1:
        # One scalar for the fused module: vLLM keeps one value (e.g. the max) across members.
        values = [float(t) for _, t in members]
        return False, f"members' scalars {values} were loaded into a single-element parameter ({float(value)})"
    try:
        expected = torch.cat([t.to(value.dtype) for _, t in members], dim=output_dim)
    except RuntimeError as exc:
        return False, f"members {shards} cannot be concatenated: {exc}"
    if expected.shape != value.shape:
        return False, f"shards {shards} concatenate to {list(expected.shape)}, parameter is {list(value.shape)}"
    if _same(value, expected):
        return True, None
    return False, f"values differ from the concatenation of shards {shards}"


# ---------------------------------------------------------------------------------------------
# GEMM against the BF16 source
# ---------------------------------------------------------------------------------------------

MEMBERS = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
    "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
}


def source_weight(source: Checkpoint, module_path: str) -> torch.Tensor:
    """The source weight for a module path like model.layers.0.self_attn.qkv_proj (ModuleList index)."""
    parts = module_path.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    layer: int | None = None
    if parts[0] == "layers":
        layer, parts = int(parts[1]), parts[2:]
    local = ".".join(parts)
    leaf = parts[-1]
    names = [".".join([*parts[:-1], m]) for m in MEMBERS.get(leaf, [leaf])]
    keys = source.keys()
    out = []
    for member in names:
        suffix = f"{member}.weight"
        if layer is None:
            found = [k for k in keys if k == suffix or (k.endswith("." + suffix) and "layers." not in k)]
        else:
            found = [
                k
                for k in keys
                if k.endswith(suffix)
                and (f"layers.{layer}.{member}.weight" in k or (layer == 0 and f"midlayer.{member}.weight" in k))
            ]
        if len(found) != 1:
            raise KeyError(f"source tensor for {local!r} member {member!r}: found {found}")
        out.append(source.get(found[0]))
    return torch.cat(out, dim=0)


# Static activation scales, stored as amax / (6 * 448) (ModelOpt) or (6 * 448) / amax (compressed-tensors).
NVFP4_ACTIVATION_SCALES = {"input_scale": lambda s: s * 6 * 448, "input_global_scale": lambda s: 6 * 448 / s}


def calibrated_amax(entry: dict[str, Any], checkpoint: Checkpoint) -> float | None:
    """The activation amax a static input scale in the checkpoint was calibrated for (None: dynamic)."""
    amaxes = [
        float(to_amax(checkpoint.get(source.split(" [")[0]).float().max()))
        for param in entry["params"]
        if (to_amax := NVFP4_ACTIVATION_SCALES.get(param["name"])) is not None
        for source in param["sources"]
    ]
    return max(amaxes) if amaxes else None


def run_gemm(module: Any, module_path: str, source: Checkpoint, amax: float | None = None) -> dict[str, Any]:
    """The module's own kernel against the source GEMM; with a static input scale, on activations scaled to
    the amax it was calibrated for (random activations past it would only measure clipping)."""
    weight = source_weight(source, module_path).float()
    generator = torch.Generator().manual_seed(GEMM_SEED)
    x = torch.randn(GEMM_TOKENS, weight.shape[1], generator=generator)
    if amax is not None:
        x = x * (amax / x.abs().max())
    x = x.to(torch.bfloat16)
    reference = x.float() @ weight.T
    try:
        with torch.no_grad():
            y = module.quant_method.apply(module, x)
    except Exception as exc:
        return {"max_abs_err": None, "rel_err": None, "note": f"apply failed on CPU: {_where(exc)}"}
    if isinstance(y, tuple):
        y = y[0]
    y = y.float()
    if y.shape != reference.shape:
        return {"max_abs_err": None, "rel_err": None, "note": f"output {list(y.shape)} != {list(reference.shape)}"}
    diff = y - reference
    return {
        "max_abs_err": float(diff.abs().max()),
        "rel_err": float(diff.norm() / reference.norm().clamp_min(1e-30)),
        "note": f"quant_method.apply on {GEMM_TOKENS} bf16 tokens vs x @ W_source.T (fp32)"
        + ("" if amax is None else f", activations at the calibrated amax {amax:.4g}"),
    }


# ---------------------------------------------------------------------------------------------
# One job
# ---------------------------------------------------------------------------------------------


class WarningCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            where = f"{Path(record.pathname).name}:{record.lineno}"
            self.lines.append(f"{record.levelname} [{where}] {record.getMessage()}")


_DISTRIBUTED_READY = False


def ensure_distributed(vllm_config: Any) -> None:
    global _DISTRIBUTED_READY
    if _DISTRIBUTED_READY:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
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


def postprocess(model: torch.nn.Module, model_config: Any) -> dict[str, str]:
    """Run vLLM's process_weights_after_loading over the model. A quant method whose step is CUDA-only
    (Marlin repack) would abort it for every module, so each module's step is wrapped to record its
    failure and let the others go on. Returns {module path: failure}."""
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    failed: dict[str, str] = {}

    def guarded(path: str, step: Callable[[torch.nn.Module], None]) -> Callable[[torch.nn.Module], None]:
        def run(layer: torch.nn.Module) -> None:
            try:
                step(layer)
            except Exception as exc:
                failed[path] = f"process_weights_after_loading failed on CPU: {_where(exc)}"

        return run

    for path, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading = guarded(path, method.process_weights_after_loading)
    process_weights_after_loading(model, model_config, torch.device("cpu"))
    return failed


def linear_like(module: torch.nn.Module) -> bool:
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return isinstance(module, (LinearBase, ParallelLMHead))


def method_name(module: torch.nn.Module) -> str | None:
    method = getattr(module, "quant_method", None)
    if method is None:
        return None
    name = type(method).__name__
    scheme = getattr(module, "scheme", None)
    if scheme is not None:
        name += f"/scheme {type(scheme).__name__}"
    return name


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.utils import get_draft_load_config
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.spec_decode.eagle import EagleProposer

    result: dict[str, Any] = {
        "checkpoint": job["checkpoint"],
        "ok": False,
        "error": None,
        "quant_config": None,
        "modules": [],
        "unconsumed": [],
        "warnings": [],
    }
    capture = WarningCapture()
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(capture)
    try:
        checkpoint = Checkpoint(job["checkpoint"])
        source = Checkpoint(job["source"]) if job.get("source") else None
        draft_config = checkpoint.config()
        target_layers = int(job.get("target_layers") or 61)
        with tempfile.TemporaryDirectory(prefix="vllm-probe-target-") as target_dir:
            write_target(Path(target_dir), draft_config, target_layers)
            engine_args = EngineArgs(
                model=target_dir,
                speculative_config={"method": "eagle3", "model": job["checkpoint"], "num_speculative_tokens": 3},
                skip_tokenizer_init=True,
                dtype="bfloat16",
                max_model_len=256,
                enforce_eager=True,
            )
            vllm_config = engine_args.create_engine_config()
        ensure_distributed(vllm_config)
        spec = vllm_config.speculative_config
        # The proposer's own recipe for the draft's config (only self.vllm_config / speculative_config are read).
        draft_vllm_config = EagleProposer._create_draft_vllm_config(
            SimpleNamespace(vllm_config=vllm_config, speculative_config=spec)
        )
        model_config = spec.draft_model_config
        loader = get_model_loader(get_draft_load_config(draft_vllm_config))
        recorder = Recorder()
        original_get_all_weights = loader.get_all_weights
        loader.get_all_weights = lambda mc, m: recorder.wrap_iterator(original_get_all_weights(mc, m))

        with set_current_vllm_config(draft_vllm_config), set_default_torch_dtype(model_config.dtype):
            with torch.device("cpu"):
                model = loader.create_model(vllm_config=draft_vllm_config, model_config=model_config)
            quant_config = None
            for module in model.modules():
                quant_config = quant_config or getattr(module, "quant_config", None)
            instrument_params(model, recorder)
            loader.load_weights(model, model_config)

            shared_lm_head = hasattr(model, "has_own_lm_head") and not model.has_own_lm_head
            modules: list[tuple[str, torch.nn.Module, dict[str, Any]]] = []
            for path, module in model.named_modules():
                if not linear_like(module):
                    continue
                method = getattr(module, "quant_method", None)
                entry: dict[str, Any] = {
                    "name": getattr(module, "prefix", None) or path,
                    "type": type(module).__name__,
                    "quant_method": method_name(module),
                    "quantized": method is not None and "Unquantized" not in type(method).__name__,
                    "params": [],
                    "gemm": None,
                }
                if shared_lm_head and entry["name"] == "lm_head":
                    entry["shared_from_target"] = True
                for pname, param in module.named_parameters(recurse=False):
                    full = f"{path}.{pname}"
                    calls = sorted(recorder.calls.get(full, []), key=lambda c: _shard_key(c.shard_id))
                    equal, detail = compare_param(
                        param,
                        calls,
                        checkpoint,
                        int(getattr(param, "output_dim", 0) or 0),
                        padded_rows=isinstance(module, VocabParallelEmbedding),
                    )
                    if not calls and shared_lm_head and entry["name"] == "lm_head":
                        detail = (
                            "never loaded: the checkpoint has no lm_head, so vLLM's proposer replaces this module"
                            " with the target's lm_head (llm_base_proposer.py::_maybe_share_lm_head)"
                        )
                    entry["params"].append(
                        {
                            "name": pname,
                            "dtype": str(param.dtype).removeprefix("torch."),
                            "shape": list(param.shape),
                            "sources": [
                                c.checkpoint_name if c.shard_id is None else f"{c.checkpoint_name} [shard {c.shard_id}]"
                                for c in calls
                            ],
                            "equal": equal,
                            "detail": detail,
                        }
                    )
                modules.append((path, module, entry))

            try:
                processing_failed = postprocess(model, model_config)
                capture.lines += [f"probe: {path}: {why}" for path, why in processing_failed.items()]
            except Exception as exc:
                why = f"process_weights_after_loading failed on CPU: {_where(exc)}"
                processing_failed = {path: why for path, _, _ in modules}
                capture.lines.append(f"probe: {why}")
            if source is not None:
                for path, module, entry in modules:
                    if path in processing_failed:
                        entry["gemm"] = {"max_abs_err": None, "rel_err": None, "note": processing_failed[path]}
                        continue
                    try:
                        entry["gemm"] = run_gemm(module, path, source, calibrated_amax(entry, checkpoint))
                    except Exception as exc:
                        entry["gemm"] = {"max_abs_err": None, "rel_err": None, "note": _where(exc)}

        result["quant_config"] = type(quant_config).__name__ if quant_config is not None else None
        result["modules"] = [entry for _, _, entry in modules]
        result["unconsumed"] = [n for n in recorder.yielded if n not in recorder.consumed]
        result["ok"] = True
        del model
    except Exception as exc:
        result["error"] = _where(exc)
        traceback.print_exc(file=sys.stderr)
    finally:
        vllm_logger.removeHandler(capture)
        result["warnings"] = capture.lines
        gc.collect()
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_probe.py JOBS.json", file=sys.stderr)
        return 2
    jobs = json.loads(Path(argv[1]).read_text())["jobs"]
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # anything vLLM prints stays off the JSON channel
    started = time.perf_counter()
    import vllm
    import vllm.engine.arg_utils
    import vllm.v1.spec_decode.eagle

    _log(f"imported vllm {vllm.__version__} in {time.perf_counter() - started:.1f}s")
    apply_patches()
    results = []
    for job in jobs:
        job_started = time.perf_counter()
        results.append(run_job(job))
        _log(f"{job['checkpoint']}: {time.perf_counter() - job_started:.1f}s ok={results[-1]['ok']}")
    out = {"engine": "vllm", "version": vllm.__version__, "patches": PATCHES, "results": results}
    real_stdout.write(json.dumps(out, indent=1) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
