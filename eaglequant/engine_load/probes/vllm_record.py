"""What vLLM's loader did, recorded and checked: which checkpoint tensor (and shard) reached each parameter,
whether the loaded values equal it, post-load processing per module, and the module's own GEMM against the
BF16 source."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .common import Checkpoint, error_line, gemm_error

GEMM_TOKENS = 8
GEMM_SEED = 1234
SHARD_ORDER = {"q": 0, "k": 1, "v": 2}


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


def shard_key(shard: Any) -> tuple[int, Any]:
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


def whole_per_shard(name: str, param: torch.Tensor) -> bool:
    """compressed-tensors' ``weight_shape`` is a plain ``BasevLLMParameter`` (no output dimension), which takes each
    shard of a merged module whole (``load_merged_column_weight`` / ``load_qkv_weight`` -> ``_assert_and_load``): the
    last one loaded stays, and no kernel reads it. (Any other parameter loaded so would be a real loss.)"""
    return name == "weight_shape" and type(param).__name__ == "BasevLLMParameter"


def compare_param(
    param: torch.Tensor,
    calls: list[LoadCall],
    checkpoint: Checkpoint,
    output_dim: int,
    padded_rows: bool = False,
    last: LoadCall | None = None,
) -> tuple[bool, str | None]:
    """``last``: the call that loaded last, when the parameter takes each shard whole (:func:`whole_per_shard`)."""
    if not calls:
        return False, "never loaded: no checkpoint tensor reached this parameter (uninitialised)"
    members: list[tuple[Any, torch.Tensor]] = []
    for call in calls:
        tensor = checkpoint.get(call.checkpoint_name) if call.checkpoint_name is not None else call.tensor
        members.append((call.shard_id, tensor))
    value = param.detach().cpu()
    sharded = any(shard is not None for shard, _ in members)
    if sharded and last is not None and all(t.shape == value.shape for _, t in members):
        kept = checkpoint.get(last.checkpoint_name) if last.checkpoint_name is not None else last.tensor
        if _same(value, kept.to(value.dtype)):
            return True, f"each shard loaded whole, the last ({last.checkpoint_name}) kept: not read by any kernel"
        return False, f"differs from the last shard loaded whole ({last.checkpoint_name})"
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
    members.sort(key=lambda item: shard_key(item[0]))
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
    detail = None
    if expected.shape != value.shape:
        if expected.numel() != value.numel():
            return False, f"shards {shards} concatenate to {list(expected.shape)}, parameter is {list(value.shape)}"
        # e.g. Quark's 1-D [N] per-channel scales, which QuarkW8A8Int8's loader unsqueezes into an [N, 1] parameter
        detail = f"shards {shards} concatenate to {list(expected.shape)}, taken as {list(value.shape)}"
        expected = expected.reshape(value.shape)
    if _same(value, expected):
        return True, detail
    return False, f"values differ from the concatenation of shards {shards}"


def discarded_unloaded(entry: dict[str, Any], module: torch.nn.Module) -> None:
    """A parameter no tensor reached that the quantization method's own process_weights_after_loading then deleted
    (QuarkW8A8Int8's ``weight_zero_point`` for symmetric weights) was never read: not a missing tensor."""
    for param in entry["params"]:
        if not param["sources"] and getattr(module, param["name"], None) is None:
            param["equal"] = True
            param["detail"] = "allocated, never loaded, then deleted by process_weights_after_loading (never read)"


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
    keys = source.names()
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
        return {"max_abs_err": None, "rel_err": None, "note": f"apply failed on CPU: {error_line(exc)}"}
    if isinstance(y, tuple):
        y = y[0]
    note = f"quant_method.apply on {GEMM_TOKENS} bf16 tokens vs x @ W_source.T (fp32)"
    return gemm_error(y, reference, note + ("" if amax is None else f", activations at the calibrated amax {amax:.4g}"))


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
                failed[path] = f"process_weights_after_loading failed on CPU: {error_line(exc)}"

        return run

    for path, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading = guarded(path, method.process_weights_after_loading)
    process_weights_after_loading(model, model_config, torch.device("cpu"))
    return failed


def int8_gemm_error() -> float | None:
    """How far vLLM's CPU INT8 GEMM (``ops.onednn_scaled_mm``, what its W8A8 INT8 layers run without AMX) is from
    exact integer arithmetic on this machine, as a relative error over a random full-range problem; None where
    CUDA runs the layers. On CPUs without int8 dot-product instructions (VNNI) oneDNN's u8 x s8 products saturate
    in 16 bits: 0.13 measured on an AVX2-only AMD EPYC, against bf16 rounding's 0.003 where the sum is exact."""
    from vllm import _custom_ops as ops

    if torch.cuda.is_available():
        return None
    generator = torch.Generator().manual_seed(GEMM_SEED)
    weight = torch.randint(-127, 128, (256, 512), dtype=torch.int8, generator=generator)
    weight_scale = torch.full((256, 1), 0.01)
    x = torch.randn(16, 512, generator=generator).to(torch.bfloat16)
    x_q, x_scale, _ = ops.scaled_int8_quant(x, None, None, symmetric=True)
    handler = ops.create_onednn_scaled_mm(weight.t(), weight_scale, torch.bfloat16, True, False)
    out = torch.empty(16, 256, dtype=torch.bfloat16)
    ops.onednn_scaled_mm(handler, x_q, out, x_scale, None, None, None)
    exact = (x_q.to(torch.int64) @ weight.to(torch.int64).T).double() * x_scale.double() * weight_scale.double().T
    return float((out.double() - exact).norm() / exact.norm())
