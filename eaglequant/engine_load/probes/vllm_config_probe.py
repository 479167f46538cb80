"""vLLM's own configuration functions, run on what eaglequant writes: no model is built, no kernel needed.

Run as ``python -m <probes>.vllm_config_probe JOBS.json OUT.json`` in an interpreter that imports vLLM (the 0.32.0
CPU build, or 0.33.0's Python sources over its dependencies: these modules import without vLLM's ``_C``). Writes
one JSON object to OUT.json: vLLM's version and one result per job. Jobs, each a dict with ``check``:

- ``excluded``: ``quantization_config`` (config.json's), ``names`` (runtime module prefixes): whether vLLM's own
  config class for that quant_method excludes each name, by its own matcher.
- ``modelopt_excludes``: ``quantization_config``: the exclusion list vLLM's ModelOpt config parses from it.
- ``layer_algos``: a MIXED_PRECISION ``quantization_config``, ``names``: the algorithm vLLM's own lookup gives each.
- ``draft_length``: ``directory`` (holding a draft's config.json), ``target_length``: the draft's max_model_len as
  vLLM derives it, whether ``SpeculativeConfig._maybe_override_draft_max_position_embeddings`` raises its
  max_position_embeddings, and the served max_model_len after ``VllmConfig._limit_max_model_len_to_draft``
  (Model Runner V2; the target's own where the release has no such step).
- ``speculators_verifier``: ``directory`` (a speculators draft): whether
  ``maybe_override_with_speculators`` accepts serving it as the model, and its error when it refuses.

It imports vLLM, never eaglequant.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from types import SimpleNamespace
from typing import Any


def _quark_excluded(config: dict[str, Any], names: list[str]) -> dict[str, bool]:
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
    from vllm.model_executor.layers.quantization.quark.utils import should_ignore_layer

    quark = QuarkConfig.from_config(config)
    exclude = quark.quant_config.get("exclude") or []
    return {name: bool(should_ignore_layer(name, exclude, quark.packed_modules_mapping)) for name in names}


def _compressed_tensors_excluded(config: dict[str, Any], names: list[str]) -> dict[str, bool]:
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import should_ignore_layer

    ct = CompressedTensorsConfig.from_config(config)
    return {name: bool(should_ignore_layer(name, ct.ignore, ct.packed_modules_mapping)) for name in names}


def _modelopt_excluded(config: dict[str, Any], names: list[str]) -> dict[str, bool]:
    modelopt = _modelopt_config(config)
    return {name: bool(modelopt.is_layer_excluded(name)) for name in names}


def _fp8_excluded(config: dict[str, Any], names: list[str]) -> dict[str, bool]:
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped

    fp8 = Fp8Config.from_config(config)
    kwargs = {}
    if "match_mode" in inspect.signature(is_layer_skipped).parameters:
        kwargs["match_mode"] = getattr(fp8, "ignored_layers_match_mode", "exact")
    ignored = fp8.ignored_layers or []
    return {name: bool(is_layer_skipped(name, ignored, fp8.packed_modules_mapping, **kwargs)) for name in names}


# config.json's quant_method -> whether vLLM's config class for it excludes each runtime name, by its own matcher
EXCLUDED_BY = {
    "quark": _quark_excluded,
    "compressed-tensors": _compressed_tensors_excluded,
    "modelopt": _modelopt_excluded,
    "fp8": _fp8_excluded,
}


def _excluded(job: dict[str, Any]) -> dict[str, Any]:
    config = job["quantization_config"]
    return {"excluded": EXCLUDED_BY[config["quant_method"]](config, job["names"])}


def _modelopt_config(config: dict[str, Any]) -> Any:
    """vLLM's ModelOpt config class for the config's quant_algo (modelopt_mixed, modelopt_fp4, else modelopt)."""
    from vllm.model_executor.layers.quantization import modelopt

    algo = str(config.get("quant_algo", "")).upper()
    if algo == "MIXED_PRECISION":
        return modelopt.ModelOptMixedPrecisionConfig.from_config(config)
    cls = modelopt.ModelOptNvFp4Config if "NVFP4" in algo else modelopt.ModelOptFp8Config
    return cls.from_config(config)


def _layer_algos(job: dict[str, Any]) -> dict[str, Any]:
    """A MIXED_PRECISION config: the algorithm vLLM gives each runtime name (None: excluded or not listed)."""
    mixed = _modelopt_config(job["quantization_config"])
    algos = {}
    for name in job["names"]:
        algos[name] = None if mixed.is_layer_excluded(name) else mixed._resolve_quant_algo(name)
    return {"algos": algos, "config": type(mixed).__name__}


def _modelopt_excludes(job: dict[str, Any]) -> dict[str, Any]:
    return {"exclude_modules": list(_modelopt_config(job["quantization_config"]).exclude_modules or [])}


def _draft_length(job: dict[str, Any]) -> dict[str, Any]:
    from vllm.config import speculative, vllm
    from vllm.transformers_utils.config import get_config

    hf_config = get_config(job["directory"], trust_remote_code=False)
    draft_length = _derived_length(hf_config)
    target_length = int(job["target_length"])
    before = hf_config.max_position_embeddings
    speculative.SpeculativeConfig._maybe_override_draft_max_position_embeddings(hf_config, target_length)
    raised = hf_config.max_position_embeddings != before
    served = target_length
    limit = getattr(vllm.VllmConfig, "_limit_max_model_len_to_draft", None)
    if limit is not None:
        spec = SimpleNamespace(method="eagle3", draft_model_config=SimpleNamespace(hf_config=hf_config))
        spec.draft_model_config.max_model_len = min(draft_length, target_length)
        spec.draft_shares_target_positions = lambda: speculative.SpeculativeConfig.draft_shares_target_positions(spec)
        holder = SimpleNamespace(
            speculative_config=spec,
            model_config=SimpleNamespace(max_model_len=target_length),
            use_v2_model_runner=True,
        )
        limit(holder)
        served = holder.model_config.max_model_len
    return {"draft_length": draft_length, "raised": raised, "served_length": served, "has_limit": limit is not None}


def _derived_length(hf_config: Any) -> int:
    """The draft's max_model_len as ModelConfig derives it when the user sets none (config/model.py)."""
    from vllm.config import model
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

    text_config = getattr(hf_config, "text_config", hf_config)
    arch = ModelArchConfigConvertorBase(hf_config, text_config).convert()
    return int(model._get_and_verify_max_len(hf_config, arch, None, None, False, None))


def _speculators_verifier(job: dict[str, Any]) -> dict[str, Any]:
    from vllm.transformers_utils.config import maybe_override_with_speculators

    try:
        model, _, _ = maybe_override_with_speculators(job["directory"], None, trust_remote_code=False)
    except ValueError as exc:
        return {"accepted": False, "error": str(exc)}
    return {"accepted": True, "model": model}


CHECKS = {
    "excluded": _excluded,
    "modelopt_excludes": _modelopt_excludes,
    "layer_algos": _layer_algos,
    "draft_length": _draft_length,
    "speculators_verifier": _speculators_verifier,
}


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    import vllm

    with open(argv[1], encoding="utf-8") as handle:
        jobs = json.load(handle)["jobs"]
    results = []
    for job in jobs:
        try:
            results.append({"ok": True, **CHECKS[job["check"]](job)})
        except Exception as exc:  # one job's failure is its result, not the probe's
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    with open(argv[2], "w", encoding="utf-8") as handle:
        json.dump({"version": vllm.__version__, "results": results}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
