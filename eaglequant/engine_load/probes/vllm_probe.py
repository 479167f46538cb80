"""Load EAGLE-3 draft checkpoints with vLLM's own code and report what each parameter received.

Standalone: runs in a venv holding vllm (see scripts/engines/vllm.sh), never imports eaglequant.

    VENV/bin/python -m probes.vllm_probe JOBS.json OUT.json   (eaglequant.engine_load names the package)

JOBS.json is {"jobs": [{"checkpoint": DIR, "source": DIR | null, "target_layers": N | null}, ...]}.
One JSON object goes to OUT.json; every log line goes to stderr. Each job is isolated: its failure is
reported in its own result.

Per job: vLLM's EngineArgs builds the config for a synthesized target (LlamaForCausalLM, or a
DeepseekV3ForCausalLM for MLA drafts) with speculative_config method eagle3; the draft is built and
loaded the way the EAGLE proposer does it (EagleProposer._create_draft_vllm_config,
get_draft_load_config, the loader's create_model + load_weights, process_weights_after_loading).
Loading is only observed: the weights iterator and every parameter's weight_loader are wrapped to
record which checkpoint tensor (and shard id) went into which parameter.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Checkpoints are local; without these, transformers and vLLM probe the Hub for every config.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch

from .common import Checkpoint, WarningCapture, error_line, new_result, serve
from .vllm_record import (
    Recorder,
    calibrated_amax,
    compare_param,
    discarded_unloaded,
    instrument_params,
    int8_gemm_error,
    postprocess,
    run_gemm,
    shard_key,
    whole_per_shard,
)
from .vllm_setup import apply_patches, ensure_distributed, write_target


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
    """Build the job's draft with vLLM's own recipe, load it with vLLM's own loader, and report every linear."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.utils import get_draft_load_config
    from vllm.utils.torch_utils import set_default_torch_dtype

    result = new_result(job)
    capture = WarningCapture()
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(capture)
    try:
        checkpoint = Checkpoint(job["checkpoint"])
        source = Checkpoint(job["source"]) if job.get("source") else None
        draft_vllm_config, model_config = draft_configs(job, checkpoint.config())
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
            modules = linear_entries(model, recorder, checkpoint)
            processing_failed = process_after_loading(model, model_config, modules, capture)
            if source is not None:
                add_gemms(modules, processing_failed, source, checkpoint)

        result["quant_config"] = type(quant_config).__name__ if quant_config is not None else None
        result["modules"] = [entry for _, _, entry in modules]
        result["unconsumed"] = [n for n in recorder.yielded if n not in recorder.consumed]
        result["ok"] = True
        del model
    except Exception as exc:
        result["error"] = error_line(exc)
        traceback.print_exc(file=sys.stderr)
    finally:
        vllm_logger.removeHandler(capture)
        result["warnings"] = capture.lines
        gc.collect()
    return result


def draft_configs(job: dict[str, Any], draft_config: dict[str, Any]) -> tuple[Any, Any]:
    """vLLM's config for the draft and its model config, made as vLLM makes them for a target (synthesized,
    ``write_target``) speculating with the job's checkpoint as its EAGLE-3 draft."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.spec_decode.eagle import EagleProposer

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
    return draft_vllm_config, spec.draft_model_config


ModuleEntries = list[tuple[str, torch.nn.Module, dict[str, Any]]]  # (path in the model, module, its report)


def linear_entries(model: torch.nn.Module, recorder: Recorder, checkpoint: Checkpoint) -> ModuleEntries:
    """Every linear-like module: its quantization method and, per parameter, which checkpoint tensors it took
    and whether the loaded values equal them."""
    shared_lm_head = hasattr(model, "has_own_lm_head") and not model.has_own_lm_head
    modules: ModuleEntries = []
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
        shared = shared_lm_head and entry["name"] == "lm_head"
        if shared:
            entry["shared_from_target"] = True
        for pname, param in module.named_parameters(recurse=False):
            entry["params"].append(param_entry(module, f"{path}.{pname}", pname, param, recorder, checkpoint, shared))
        modules.append((path, module, entry))
    return modules


def param_entry(
    module: torch.nn.Module,
    full: str,
    pname: str,
    param: torch.nn.Parameter,
    recorder: Recorder,
    checkpoint: Checkpoint,
    shared_lm_head: bool,
) -> dict[str, Any]:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    loaded = recorder.calls.get(full, [])
    calls = sorted(loaded, key=lambda c: shard_key(c.shard_id))
    equal, detail = compare_param(
        param,
        calls,
        checkpoint,
        int(getattr(param, "output_dim", 0) or 0),
        padded_rows=isinstance(module, VocabParallelEmbedding),
        last=loaded[-1] if loaded and whole_per_shard(pname, param) else None,
    )
    if not calls and shared_lm_head:
        detail = (
            "never loaded: the checkpoint has no lm_head, so vLLM's proposer replaces this module"
            " with the target's lm_head (llm_base_proposer.py::_maybe_share_lm_head)"
        )
    return {
        "name": pname,
        "dtype": str(param.dtype).removeprefix("torch."),
        "shape": list(param.shape),
        "sources": [
            c.checkpoint_name if c.shard_id is None else f"{c.checkpoint_name} [shard {c.shard_id}]" for c in calls
        ],
        "equal": equal,
        "detail": detail,
    }


def process_after_loading(
    model: torch.nn.Module, model_config: Any, modules: ModuleEntries, capture: WarningCapture
) -> dict[str, str]:
    """vLLM's process_weights_after_loading, as after a load; module path -> why it failed on CPU."""
    try:
        processing_failed = postprocess(model, model_config)
        capture.lines += [f"probe: {path}: {why}" for path, why in processing_failed.items()]
    except Exception as exc:
        why = f"process_weights_after_loading failed on CPU: {error_line(exc)}"
        processing_failed = {path: why for path, _, _ in modules}
        capture.lines.append(f"probe: {why}")
    for _, module, entry in modules:  # whatever failed later, a parameter the method deleted is gone
        discarded_unloaded(entry, module)
    return processing_failed


def add_gemms(
    modules: ModuleEntries, processing_failed: dict[str, str], source: Checkpoint, checkpoint: Checkpoint
) -> None:
    """Each module's output against the source's GEMM, where its processing ran."""
    for path, module, entry in modules:
        if path in processing_failed:
            entry["gemm"] = {"max_abs_err": None, "rel_err": None, "note": processing_failed[path]}
            continue
        try:
            entry["gemm"] = run_gemm(module, path, source, calibrated_amax(entry, checkpoint))
        except Exception as exc:
            entry["gemm"] = {"max_abs_err": None, "rel_err": None, "note": error_line(exc)}


def start() -> tuple[str, list[str]]:
    import vllm
    import vllm.engine.arg_utils
    import vllm.v1.spec_decode.eagle

    return vllm.__version__, apply_patches()


def platform() -> dict[str, Any]:
    """What this machine does to vLLM's kernels, measured once a run."""
    return {"int8_gemm_rel_err": int8_gemm_error()}


if __name__ == "__main__":
    sys.exit(serve(sys.argv, "vllm", start, run_job, platform=platform))
