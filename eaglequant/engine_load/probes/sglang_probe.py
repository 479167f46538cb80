"""Load eaglequant checkpoints with SGLang's own code on a CPU-only machine and report what it did.

Standalone: imports only the standard library, torch, safetensors, sglang and its dependencies (it runs in
the engine's own venv, where eaglequant is not installed).

    VENV/bin/python -m probes.sglang_probe JOBS.json OUT.json   (eaglequant.engine_load names the package)

JOBS.json: {"jobs": [{"checkpoint": DIR, "source": DIR or null, "target_layers": N or null,
"capability": [major, minor] (optional, default 10.0)}, ...]}. One JSON object goes to OUT.json, logs to stderr.

Each job follows SGLang's draft-model path: ServerArgs published as the scheduler's, the draft's ModelConfig,
``loader._get_quantization_config`` (config parsing, capability check), ``loader._initialize_model`` (the
registry's EAGLE-3 class), ``DefaultModelLoader.load_weights_only`` over SGLang's own weights iterator, then
``postprocess_weights`` (each quant method's ``process_weights_after_loading``). The probe records every
``weight_loader`` call to check parameter values against the checkpoint before post-processing.
"""

from __future__ import annotations

import gc
import logging
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from .common import Checkpoint, WarningCapture, error_line, free_port, new_result, serve
from .sglang_record import LoadRecorder, d2t_taken, describe_modules, run_gemm
from .sglang_setup import _CAPABILITY, DEFAULT_CAPABILITY, STUBS, patch_capability, platform_overrides

log = logging.getLogger("sglang_probe")
CUDA_ONLY = ("Torch not compiled with CUDA enabled", "active drivers", "Found no NVIDIA driver")


class Engine:
    def __init__(self) -> None:
        self.distributed = False

    def init_distributed(self) -> None:
        from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

        init_distributed_environment(
            backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{free_port()}"
        )
        initialize_model_parallel()
        self.distributed = True

    def run(self, job: dict) -> dict:
        """Build the job's draft as SGLang's scheduler does, load it with SGLang's own loader, report every linear."""
        checkpoint = job["checkpoint"]
        cap = tuple(job.get("capability") or DEFAULT_CAPABILITY)
        _CAPABILITY[:] = cap
        result = new_result(job, capability=f"{cap[0]}.{cap[1]}", postprocess=None)
        capture = WarningCapture()
        logging.getLogger().addHandler(capture)
        from sglang.srt.runtime_context import override_platform

        loaded = Loaded()
        try:
            with override_platform(**platform_overrides(cap)), warnings.catch_warnings():
                warnings.simplefilter("default")
                self.load(checkpoint, result, loaded)
                if job.get("source"):
                    source = Checkpoint(job["source"]).all()
                    for entry in result["modules"]:
                        entry["gemm"] = run_gemm(entry, loaded.by_path[entry["path"]], source)
        except Exception as exc:
            result["error"] = error_line(exc)
            log.warning("job %s failed:\n%s", checkpoint, traceback.format_exc())
        finally:
            logging.getLogger().removeHandler(capture)
            result["warnings"] = capture.lines
            result["unconsumed"] = unconsumed(checkpoint, loaded.model, loaded.recorder)
            del loaded
            gc.collect()
        return result

    def load(self, checkpoint: str, result: dict, loaded: Loaded) -> None:
        """Build and load the draft into ``loaded``, its report into ``result``."""
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.model_loader import loader as sgl_loader
        from sglang.srt.model_loader.utils import set_default_torch_dtype

        model_config, load_format = self.draft_model_config(checkpoint)
        load_config = LoadConfig(load_format=load_format)
        quant_config = sgl_loader._get_quantization_config(model_config, load_config)
        result["quant_config"] = type(quant_config).__name__ if quant_config is not None else None
        prefixes = record_prefixes(quant_config)
        with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
            model = sgl_loader._initialize_model(model_config, load_config, quant_config)
        recorder = LoadRecorder(model)
        loaded.model, loaded.recorder = model, recorder
        weights = sgl_loader.DefaultModelLoader(load_config)._get_all_weights(model_config, model)
        load_error = None
        try:
            # MLA drafts run post_load_weights inside load_weights
            sgl_loader.DefaultModelLoader.load_weights_only(model, recorder.iterate(weights), torch.device("cpu"))
        except Exception as exc:
            load_error = exc
            log.debug("load_weights failed", exc_info=True)
        result["modules"], loaded.by_path = describe_modules(model, recorder, prefixes)
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

    def draft_model_config(self, checkpoint: str) -> tuple[Any, str]:
        """SGLang's model config for the draft, as the scheduler process of a server serving a target makes it (the
        draft's own directory stands in for the target: only the draft is built), and the server's load format."""
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import ServerArgs

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
        return model_config, server_args.load_format


@dataclass
class Loaded:
    """What a job has built so far: the model, the recorder of its loading, its modules by path."""

    model: Any = None
    recorder: Any = None
    by_path: dict[str, Any] = field(default_factory=dict)


def record_prefixes(quant_config: Any) -> dict[int, str]:
    """id(layer) -> the name SGLang matches exclusion rules against (not every layer class stores it), filled as
    the model is built."""
    prefixes: dict[int, str] = {}
    if quant_config is not None:
        get_quant_method = quant_config.get_quant_method

        def recording_get_quant_method(layer: torch.nn.Module, prefix: str, *args: Any, **kwargs: Any) -> Any:
            prefixes[id(layer)] = prefix
            return get_quant_method(layer, prefix, *args, **kwargs)

        quant_config.get_quant_method = recording_get_quant_method
    return prefixes


def unconsumed(checkpoint: str, model: Any, recorder: Any) -> list[str]:
    """The checkpoint's tensors the load never took."""
    try:
        used = {n for calls in (recorder.calls.values() if recorder else []) for names, _ in calls for n in names}
        tensors = Checkpoint(checkpoint)
        used |= d2t_taken(model, tensors)
        return [n for n in tensors.names() if n not in used]
    except Exception as exc:
        return [f"<cannot list: {error_line(exc)}>"]


def start() -> tuple[str, list[str]]:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)
    sys.meta_path.insert(0, STUBS)
    import sglang
    import sglang.srt.model_loader.loader
    import sglang.srt.models.kimi_k25_eagle3
    import sglang.srt.models.llama_eagle3
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()  # imports every model module now, not inside the first job
    return sglang.__version__, [patch_capability()]


def stubbed() -> list[str]:
    return [
        f"{name} stubbed: {STUBS.names[name]} (imported by {', '.join(sorted(importers))})"
        for name, importers in STUBS.importers.items()
    ]


if __name__ == "__main__":
    sys.exit(serve(sys.argv, "sglang", start, Engine().run, stubbed))
