"""What SGLang's loader did, recorded and checked: which checkpoint tensors reached each parameter (in shard
order), whether the loaded values equal them, and each module's own GEMM against the BF16 source."""

from __future__ import annotations

from typing import Any

import torch

from .common import Checkpoint, error_line, gemm_error

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

    def expected(self, calls: list[tuple[list[str], Any]], param: torch.Tensor, whole: bool = False) -> torch.Tensor:
        """``whole``: the parameter takes each shard whole (:func:`whole_per_shard`)."""
        if len(calls) > 1 and whole and all(self.tensors[c[0][0]].shape == param.shape for c in calls):
            return self.tensors[calls[-1][0][0]]  # each shard loaded whole: the last stays
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


def whole_per_shard(name: str, param: torch.Tensor) -> bool:
    """compressed-tensors' ``weight_shape`` is a plain ``BasevLLMParameter``, which takes each shard of a merged module
    whole (``load_merged_column_weight`` / ``load_qkv_weight`` -> ``_assert_and_load``): the last one loaded stays, and
    Marlin never reads it. (Any other parameter loaded so would be a real loss.)"""
    return name == "weight_shape" and type(param).__name__ == "BasevLLMParameter"


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
                    expected = recorder.expected(calls, param, whole_per_shard(leaf, param))
                    target = param
                    if isinstance(module, ParallelLMHead) and expected.dim() and 0 < expected.shape[0] < param.shape[0]:
                        target = param[: expected.shape[0]]  # vocab padded to a multiple of 64; padding never loaded
                    entry["equal"], entry["detail"] = same_values(target, expected)
                    if entry["equal"] and len(calls) > 1 and whole_per_shard(leaf, param):
                        entry["detail"] = "each shard loaded whole, the last kept: not read by any kernel"
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
        method = type(module.quant_method).__name__ if hasattr(module, "quant_method") else "nn.Linear"
        return gemm_error(y, y_ref, f"{method}.apply, x[{GEMM_TOKENS}, {w_ref.shape[1]}] bf16 seed {SEED}")
    except Exception as exc:
        return {"max_abs_err": None, "rel_err": None, "note": f"no CPU path: {error_line(exc)}"}


def d2t_taken(model: Any, checkpoint: Checkpoint) -> set[str]:
    """load_weights keeps d2t as the model's hot_token_id (d2t + arange), not as a parameter."""
    hot = getattr(model, "hot_token_id", None)
    names = [n for n in checkpoint.names() if n == "d2t" or n.endswith(".d2t")]
    if hot is None or len(names) != 1:
        return set()
    d2t = checkpoint.get(names[0])
    return set(names) if torch.equal(hot.cpu(), d2t + torch.arange(d2t.shape[0])) else set()
