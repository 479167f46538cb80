"""Load eaglequant checkpoints with SGLang's own code on a CPU-only machine and report what it did.

Standalone: imports only the standard library, torch, safetensors, sglang and its dependencies (it runs in
the engine's own venv, where eaglequant is not installed).

    VENV/bin/python sglang_probe.py JOBS.json

JOBS.json: {"jobs": [{"checkpoint": DIR, "source": DIR or null, "target_layers": N or null,
"capability": [major, minor] (optional, default 10.0)}, ...]}. One JSON object goes to stdout, logs to stderr.

Each job follows SGLang's draft-model path: ServerArgs published as the scheduler's, the draft's ModelConfig,
``loader._get_quantization_config`` (config parsing, capability check), ``loader._initialize_model`` (the
registry's EAGLE-3 class), ``DefaultModelLoader.load_weights_only`` over SGLang's own weights iterator, then
``postprocess_weights`` (each quant method's ``process_weights_after_loading``). The probe records every
``weight_loader`` call to check parameter values against the checkpoint before post-processing.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import importlib.abc
import importlib.machinery
import json
import logging
import os
import socket
import sys
import time
import traceback
import types
import warnings
from typing import Any

import torch

log = logging.getLogger("sglang_probe")
DEFAULT_CAPABILITY = (10, 0)
SEED = 0
GEMM_TOKENS = 4
# Shard order of SGLang's fused modules, by member name.
MEMBER_ORDER = {
    "q_proj": 0,
    "k_proj": 1,
    "v_proj": 2,
    "gate_proj": 0,
    "up_proj": 1,
    "q_a_proj": 0,
    "kv_a_proj_with_mqa": 1,
}
SHARD_INDEX = {"q": 0, "k": 1, "v": 2}
CUDA_ONLY = ("Torch not compiled with CUDA enabled", "active drivers", "Found no NVIDIA driver")


# ---------------------------------------------------------------- patches


class _Anything:
    """Stands in for any attribute of a stubbed module (used only at import time by code off the draft path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything()

    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves stub modules for packages absent from the engine venv; records who imported them."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # module name -> why it may be stubbed
        self.importers: dict[str, set[str]] = {}

    def _stubbed(self, fullname: str) -> str | None:
        for name in self.names:
            if fullname == name or fullname.startswith(name + ".") or name.startswith(fullname + "."):
                return name
        return None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        name = self._stubbed(fullname)
        if name is None:
            return None
        try:  # a real install wins
            if importlib.machinery.PathFinder.find_spec(fullname, path) is not None:
                return None
        except (ImportError, ValueError):
            pass
        frame: Any = sys._getframe(1)
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("sglang"):
            frame = frame.f_back
        importer = frame.f_globals["__name__"] if frame is not None else "?"
        self.importers.setdefault(name, set()).add(importer)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []
        # transformers parses the version of any torchvision it finds
        module.__version__ = "0.0"  # type: ignore[attr-defined]


STUBS = _StubFinder(
    {
        "torchvision": "imported at module level by SGLang's multimodal utils and configs; unused by the draft",
        # vllm itself is only a parent package for _custom_ops; anything else importing it is reported too
        "vllm._custom_ops": "imported by the rotary-embedding fallback when not on CUDA/HIP/CPU-engine; not run",
    }
)
_CAPABILITY = list(DEFAULT_CAPABILITY)


def _capability(device: Any = None) -> tuple[int, int]:
    return _CAPABILITY[0], _CAPABILITY[1]


def patch_capability() -> str:
    """Report a CUDA device capability: SGLang reads it through sglang.srt.utils (bound by name in many modules),
    torch.cuda directly, and its platform facts; on CPU all answer None."""
    from sglang.srt.utils import common

    original = common.get_device_capability
    torch.cuda.get_device_capability = _capability
    rebound = 0
    for module in list(sys.modules.values()):
        if (
            module is not None
            and module.__name__.startswith("sglang")
            and getattr(module, "get_device_capability", None) is original
        ):
            module.get_device_capability = _capability  # type: ignore[attr-defined]
            rebound += 1
    default = f"{DEFAULT_CAPABILITY[0]}.{DEFAULT_CAPABILITY[1]}"
    return (
        f"GPU capability reported as the job's (default {default}): sglang.srt.utils.get_device_capability "
        f"(rebound in {rebound} modules), torch.cuda.get_device_capability and the platform facts "
        "is_sm90/is_sm100/is_blackwell/device_capability; no GPU here"
    )


def platform_overrides(cap: tuple[int, int]) -> dict[str, Any]:
    major = cap[0]
    return {
        "device_capability": tuple(cap),
        "device_sm": major * 10 + cap[1],
        "is_sm90": major == 9,
        "is_sm100": major == 10,
        "is_sm100_or_sm110": major in (10, 11),
        "is_sm110": major == 11,
        "is_sm120": major == 12,
        "is_blackwell": major in (10, 11, 12),
    }


# ---------------------------------------------------------------- per-job helpers


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")
        except Exception:
            self.lines.append(f"{record.levelname} {record.name}: {record.msg!r}")


def error_line(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}{where}"


def member_key(name: str) -> str:
    """Canonical module name of a checkpoint / source tensor: layer prefix unified, leaf dropped."""
    name = name.removeprefix("model.")
    if name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer.") :]
    return name.rsplit(".", 1)[0]


def shard_position(shard_id: Any, name: str) -> int:
    if isinstance(shard_id, int):
        return shard_id
    if shard_id in SHARD_INDEX:
        return SHARD_INDEX[shard_id]
    return MEMBER_ORDER.get(member_key(name).rsplit(".", 1)[-1], 0)


def bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.bool,):
        return t
    size = t.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return t.contiguous().view(view)


def same_values(param: torch.Tensor, expected: torch.Tensor) -> tuple[bool, str | None]:
    """Value-for-value check, after casting the checkpoint tensor to the parameter's dtype."""
    if expected.dtype != param.dtype:
        expected = expected.to(param.dtype)
    detail = None
    if tuple(expected.shape) != tuple(param.shape):
        if expected.numel() != param.numel():
            return False, f"checkpoint shape {list(expected.shape)} vs parameter {list(param.shape)}"
        detail = f"same values, checkpoint shape {list(expected.shape)} reshaped to {list(param.shape)}"
        expected = expected.reshape(param.shape)
    if torch.equal(bits(param.detach().cpu()), bits(expected)):
        return True, detail
    diff = (param.detach().float().cpu() - expected.float()).abs()
    differing = int((bits(param.detach().cpu()) != bits(expected)).sum())
    return False, f"{differing} of {param.numel()} elements differ (max abs diff {diff.max().item():.4g})"


class LoadRecorder:
    """Wraps the checkpoint iterator and every parameter's weight_loader to learn which tensors went where."""

    def __init__(self, model: torch.nn.Module) -> None:
        from sglang.srt.model_loader.weight_utils import default_weight_loader

        self.tensors: dict[str, torch.Tensor] = {}  # every tensor the iterator yielded
        self.current: str | None = None
        self.calls: dict[str, list[tuple[list[str], Any]]] = {}  # param name -> [(checkpoint names, shard id)]
        self.param_names = {id(p): n for n, p in model.named_parameters()}
        for _name, param in model.named_parameters():
            if hasattr(param, "_weight_loader"):  # BasevLLMParameter: weight_loader is a read-only property
                param._weight_loader = self._wrap(param._weight_loader)
            else:
                param.weight_loader = self._wrap(getattr(param, "weight_loader", default_weight_loader))  # type: ignore[attr-defined]

    def iterate(self, weights: Any) -> Any:
        for name, tensor in weights:
            self.tensors[name] = tensor
            self.current = name
            yield name, tensor
        self.current = None

    def _sources(self, loaded: torch.Tensor) -> list[str]:
        current = self.current
        if current is None:
            return []
        own = self.tensors[current]
        if loaded is own or (loaded.shape == own.shape and loaded.data_ptr() == own.data_ptr()):
            return [current]
        # The loader built a new tensor (the MLA draft concatenates q_a and kv_a): find the earlier member.
        leaf = member_key(current).rsplit(".", 1)[-1]
        for a, b in (("q_a_proj", "kv_a_proj_with_mqa"), ("kv_a_proj_with_mqa", "q_a_proj")):
            if leaf == a:
                partner = current.replace(a, b)
                if partner in self.tensors:
                    names = sorted([current, partner], key=lambda n: shard_position(None, n))
                    return names
        return [current]

    def _wrap(self, loader: Any) -> Any:
        recorder = self

        def recording_loader(param: torch.Tensor, loaded: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            shard_id = args[0] if args else kwargs.get("loaded_shard_id", kwargs.get("shard_id"))
            name = recorder.param_names.get(id(param), "?")
            recorder.calls.setdefault(name, []).append((recorder._sources(loaded), shard_id))
            return loader(param, loaded, *args, **kwargs)

        return recording_loader

    def expected(self, calls: list[tuple[list[str], Any]], param: torch.Tensor) -> torch.Tensor:
        if len(calls) == 1 and calls[0][1] is None:
            names = calls[0][0]
            parts = [self.tensors[n] for n in names]
            return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        ordered = sorted(calls, key=lambda c: shard_position(c[1], c[0][0]))
        parts = [self.tensors[c[0][0]] for c in ordered]
        if all(p.numel() == 1 for p in parts):
            if param.numel() == len(parts):  # one element per member
                return torch.stack([p.reshape(()) for p in parts]).reshape(param.shape)
            if param.numel() == 1 and all(
                torch.equal(bits(p.to(param.dtype)), bits(parts[0].to(param.dtype))) for p in parts
            ):
                return parts[0]
        return torch.cat([p.reshape(-1, *p.shape[1:]) if p.dim() else p.reshape(1) for p in parts], dim=0)


def describe_modules(
    model: torch.nn.Module, recorder: LoadRecorder, prefixes: dict[int, str]
) -> tuple[list[dict], dict[str, torch.nn.Module]]:
    from sglang.srt.layers.linear import LinearBase
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead

    modules, by_path = [], {}
    for path, module in model.named_modules():
        if not isinstance(module, (LinearBase, torch.nn.Linear, ParallelLMHead)):
            continue
        method = getattr(module, "quant_method", None)
        scheme = getattr(module, "scheme", None) or getattr(method, "scheme", None)
        method_name = None
        if method is not None:
            method_name = type(method).__name__ + (f"/{type(scheme).__name__}" if scheme is not None else "")
        params = []
        for leaf, param in module.named_parameters(recurse=False):
            full = f"{path}.{leaf}" if path else leaf
            calls = recorder.calls.get(full, [])
            entry: dict[str, Any] = {
                "name": leaf,
                "dtype": str(param.dtype).removeprefix("torch."),
                "shape": list(param.shape),
                "sources": [n for names, _ in sorted(calls, key=lambda c: shard_position(c[1], c[0][0])) for n in names]
                if calls
                else [],
                "equal": False,
                "detail": None,
            }
            if not calls:
                entry["detail"] = "no checkpoint tensor was loaded into it"
            else:
                try:
                    expected = recorder.expected(calls, param)
                    target = param
                    if isinstance(module, ParallelLMHead) and 0 < expected.shape[0] < param.shape[0]:
                        target = param[: expected.shape[0]]  # vocab padded to a multiple of 64; padding never loaded
                    entry["equal"], entry["detail"] = same_values(target, expected)
                    if target is not param and entry["equal"]:
                        entry["detail"] = f"first {expected.shape[0]} rows; the rest is vocab padding"
                except Exception as exc:
                    entry["detail"] = f"cannot compare: {error_line(exc)}"
            params.append(entry)
        modules.append(
            {
                "name": prefixes.get(id(module)) or getattr(module, "prefix", None) or path,
                "path": path,
                "type": type(module).__name__,
                "quant_method": method_name,
                "quantized": method is not None and not type(method).__name__.startswith("Unquantized"),
                "params": params,
                "gemm": None,
            }
        )
        by_path[path] = module
    return modules, by_path


def read_source(source: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(source, "*.safetensors")))
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(f))
    if not files:
        for f in sorted(glob.glob(os.path.join(source, "*.bin"))):
            tensors.update(torch.load(f, map_location="cpu", weights_only=True))
    return tensors


def source_weight(source: dict[str, torch.Tensor], member: str) -> torch.Tensor | None:
    by_key = {member_key(n): n for n in source if n.endswith(".weight")}
    if member in by_key:
        return source[by_key[member]]
    tail = member.split(".", 2)[-1] if member.startswith("layers.") else member
    hits = [n for k, n in by_key.items() if k == tail or k.endswith("." + tail)]
    return source[hits[0]] if len(hits) == 1 else None


def run_gemm(entry: dict, module: Any, source: dict[str, torch.Tensor]) -> dict | None:
    weight_params = [p for p in entry["params"] if p["sources"] and p["name"] in ("weight", "weight_packed")]
    if not weight_params:
        return None
    members = list(dict.fromkeys(member_key(n) for n in weight_params[0]["sources"]))
    refs = [source_weight(source, m) for m in members]
    if any(r is None for r in refs):
        return {"max_abs_err": None, "rel_err": None, "note": f"no source weight for {members}"}
    w_ref = torch.cat([r.float() for r in refs], dim=0)  # type: ignore[union-attr]
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(GEMM_TOKENS, w_ref.shape[1], generator=gen).to(torch.bfloat16)
    y_ref = x.float() @ w_ref.T
    try:
        with torch.no_grad():
            y = module(x) if isinstance(module, torch.nn.Linear) else module.quant_method.apply(module, x)
        y = y[0] if isinstance(y, tuple) else y
        err = (y.float() - y_ref).reshape(-1)
        method = type(module.quant_method).__name__ if hasattr(module, "quant_method") else "nn.Linear"
        return {
            "max_abs_err": err.abs().max().item(),
            "rel_err": (err.norm() / y_ref.norm()).item(),
            "note": f"{method}.apply, x[{GEMM_TOKENS}, {w_ref.shape[1]}] bf16 seed {SEED}",
        }
    except Exception as exc:
        return {"max_abs_err": None, "rel_err": None, "note": f"no CPU path: {error_line(exc)}"}


def d2t_taken(model: Any, checkpoint: str) -> set[str]:
    """load_weights keeps d2t as the model's hot_token_id (d2t + arange), not as a parameter."""
    hot = getattr(model, "hot_token_id", None)
    names = [n for n in checkpoint_names(checkpoint) if n == "d2t" or n.endswith(".d2t")]
    if hot is None or len(names) != 1:
        return set()
    d2t = read_tensor(checkpoint, names[0])
    return set(names) if torch.equal(hot.cpu(), d2t + torch.arange(d2t.shape[0])) else set()


def read_tensor(checkpoint: str, name: str) -> torch.Tensor:
    from safetensors import safe_open

    for f in sorted(glob.glob(os.path.join(checkpoint, "*.safetensors"))):
        with safe_open(f, "pt") as handle:
            if name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                return handle.get_tensor(name)
    raise KeyError(name)


def checkpoint_names(checkpoint: str) -> list[str]:
    from safetensors import safe_open

    names: list[str] = []
    for f in sorted(glob.glob(os.path.join(checkpoint, "*.safetensors"))):
        with safe_open(f, "pt") as handle:
            names.extend(handle.keys())
    return names


# ---------------------------------------------------------------- the run


class Engine:
    def __init__(self) -> None:
        self.distributed = False

    def init_distributed(self) -> None:
        from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        init_distributed_environment(
            backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}"
        )
        initialize_model_parallel()
        self.distributed = True

    def run(self, job: dict) -> dict:
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.model_loader import loader as sgl_loader
        from sglang.srt.model_loader.utils import set_default_torch_dtype
        from sglang.srt.runtime_context import SpawnRanks, override_platform, publish
        from sglang.srt.server_args import ServerArgs

        checkpoint = job["checkpoint"]
        cap = tuple(job.get("capability") or DEFAULT_CAPABILITY)
        _CAPABILITY[:] = cap
        result: dict[str, Any] = {
            "checkpoint": checkpoint,
            "ok": False,
            "error": None,
            "capability": f"{cap[0]}.{cap[1]}",
            "quant_config": None,
            "postprocess": None,
            "modules": [],
            "unconsumed": [],
            "warnings": [],
        }
        capture = LogCapture()
        logging.getLogger().addHandler(capture)
        model = recorder = None
        try:
            with override_platform(**platform_overrides(cap)), warnings.catch_warnings():
                warnings.simplefilter("default")
                # The draft is loaded by the scheduler process of a server serving a target; the draft's own
                # directory stands in for the target here (only the draft is built).
                server_args = ServerArgs(
                    model_path=checkpoint,
                    speculative_algorithm="EAGLE3",
                    speculative_draft_model_path=checkpoint,
                    dtype="bfloat16",
                    device="cpu",
                )
                publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
                if not self.distributed:
                    self.init_distributed()
                model_config = ModelConfig.from_server_args(server_args, model_path=checkpoint, is_draft_model=True)
                load_config = LoadConfig(load_format=server_args.load_format)
                quant_config = sgl_loader._get_quantization_config(model_config, load_config)
                result["quant_config"] = type(quant_config).__name__ if quant_config is not None else None
                prefixes: dict[int, str] = {}
                if quant_config is not None:
                    # the name SGLang matches exclusion rules against (not every layer class stores it)
                    get_quant_method = quant_config.get_quant_method

                    def recording_get_quant_method(
                        layer: torch.nn.Module, prefix: str, *args: Any, **kwargs: Any
                    ) -> Any:
                        prefixes[id(layer)] = prefix
                        return get_quant_method(layer, prefix, *args, **kwargs)

                    quant_config.get_quant_method = recording_get_quant_method
                with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
                    model = sgl_loader._initialize_model(model_config, load_config, quant_config)
                recorder = LoadRecorder(model)
                default_loader = sgl_loader.DefaultModelLoader(load_config)
                weights = default_loader._get_all_weights(model_config, model)
                load_error = None
                try:
                    # MLA drafts run post_load_weights inside load_weights
                    sgl_loader.DefaultModelLoader.load_weights_only(
                        model, recorder.iterate(weights), torch.device("cpu")
                    )
                except Exception as exc:
                    load_error = exc
                    log.debug("load_weights failed", exc_info=True)
                result["modules"], by_path = describe_modules(model, recorder, prefixes)
                if getattr(model, "load_lm_head_from_target", False):
                    # The EAGLE worker replaces the draft's lm_head with the target's (set_embed_and_head).
                    for entry in result["modules"]:
                        if entry["name"] == "lm_head":
                            entry["shared_from_target"] = True
                if load_error is not None:
                    raise load_error
                try:
                    sgl_loader.DefaultModelLoader.postprocess_weights(model, torch.device("cpu"))
                except Exception as exc:
                    # Repacking for a CUDA kernel (Marlin, ...) needs CUDA: a limit of this machine, not of the
                    # checkpoint. Anything else is a failure.
                    if not any(s in str(exc) for s in CUDA_ONLY):
                        raise
                    result["postprocess"] = f"skipped, needs CUDA: {error_line(exc)}"
                result["ok"] = True
                if job.get("source"):
                    source = read_source(job["source"])
                    for entry in result["modules"]:
                        entry["gemm"] = run_gemm(entry, by_path[entry["path"]], source)
        except Exception as exc:
            result["error"] = error_line(exc)
            log.warning("job %s failed:\n%s", checkpoint, traceback.format_exc())
        finally:
            logging.getLogger().removeHandler(capture)
            result["warnings"] = capture.lines
            try:
                used = {
                    n for calls in (recorder.calls.values() if recorder else []) for names, _ in calls for n in names
                }
                used |= d2t_taken(model, checkpoint)
                result["unconsumed"] = [n for n in checkpoint_names(checkpoint) if n not in used]
            except Exception as exc:
                result["unconsumed"] = [f"<cannot list: {error_line(exc)}>"]
            del model, recorder
            gc.collect()
        return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: sglang_probe.py JOBS.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        jobs = json.load(f)["jobs"]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)
    out = sys.stdout
    report: dict[str, Any] = {"engine": "sglang", "version": None, "patches": [], "results": []}
    with contextlib.redirect_stdout(sys.stderr):
        started = time.perf_counter()
        sys.meta_path.insert(0, STUBS)
        import sglang
        import sglang.srt.model_loader.loader
        import sglang.srt.models.kimi_k25_eagle3
        import sglang.srt.models.llama_eagle3
        from sglang.srt.models.registry import ModelRegistry

        ModelRegistry.get_supported_archs()  # imports every model module now, not inside the first job
        report["version"] = sglang.__version__
        capability_patch = patch_capability()
        log.warning("sglang %s imported in %.1f s", sglang.__version__, time.perf_counter() - started)
        engine = Engine()
        for job in jobs:
            tic = time.perf_counter()
            report["results"].append(engine.run(job))
            log.warning("job %s: %.2f s", job["checkpoint"], time.perf_counter() - tic)
        for name, importers in STUBS.importers.items():
            report["patches"].append(
                f"{name} stubbed: {STUBS.names[name]} (imported by {', '.join(sorted(importers))})"
            )
        report["patches"].append(capability_patch)
    json.dump(report, out, indent=1)
    out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
