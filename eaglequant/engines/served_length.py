"""The context length vLLM serves a model with, read from its config.json the way vLLM derives it.

From vLLM's own source (v0.32.0 and v0.33.0 agree on this):
- ``transformers_utils/model_arch_config_convertor.py::derive_max_model_len_and_key``: the smallest of the length
  keys the text config has (``max_position_embeddings``, ``n_positions``, ...), except that ``model_max_length``,
  when set, wins.
- ``config/model.py::_get_and_verify_max_len``: multiplied by the rope ``factor`` unless the rope type already
  counts it (YaRN variants, ``longrope``, ``llama3``, ``su``, ``deepseek_llama_scaling``).

What v0.33.0 does with a draft's length, and the config change that keeps the target's, is ``vllm_0_33.py``'s.
"""

from __future__ import annotations

from typing import Any

_FACTOR_ALREADY_COUNTED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def draft_config(head_config: dict[str, Any]) -> dict[str, Any]:
    """The config vLLM builds the draft's model config from (a speculators head's ``transformer_layer_config``)."""
    nested = head_config.get("transformer_layer_config")
    return nested if "speculators_config" in head_config and isinstance(nested, dict) else head_config


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """A multimodal config's ``text_config``, else the config itself."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def rope_parameters(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The config's rope parameter sets (``rope_parameters``, nested per layer type or not; else the older
    ``rope_scaling``), each with its ``rope_type`` (the legacy ``type`` key read as it; ``default`` when absent)."""
    found = config.get("rope_parameters")
    if not isinstance(found, dict) or not found:
        found = config.get("rope_scaling")
    if not isinstance(found, dict) or not found:
        return []
    nested = all(isinstance(value, dict) for value in found.values())
    sets = [value for value in found.values() if value] if nested else [found]
    return [{**params, "rope_type": params.get("rope_type", params.get("type", "default"))} for params in sets]


def rope_types(config: dict[str, Any]) -> list[str]:
    return [params["rope_type"] for params in rope_parameters(text_config(config))]


def served_length(config: dict[str, Any]) -> int | None:
    """The max_model_len vLLM derives from ``config`` when the user sets none (None: the config names no length)."""
    text = text_config(config)
    lengths = [text[key] for key in _LENGTH_KEYS if _is_length(text.get(key))]
    if not lengths:
        return None
    derived = text["model_max_length"] if _is_length(text.get("model_max_length")) else min(lengths)
    factor = 1.0
    for params in rope_parameters(text):
        if params["rope_type"] not in _FACTOR_ALREADY_COUNTED and isinstance(params.get("factor"), (int, float)):
            factor = float(params["factor"])
    return int(derived * factor)


def _is_length(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
