"""The context length vLLM serves a model with, read from its config.json the way vLLM derives it.

From vLLM's own source (v0.32.0 and v0.33.0 agree on this part):
- ``transformers_utils/model_arch_config_convertor.py::derive_max_model_len_and_key``: the smallest of the length
  keys the text config has (``max_position_embeddings``, ``n_positions``, ...), except that ``model_max_length``,
  when set, wins.
- ``config/model.py::_get_and_verify_max_len``: multiplied by the rope ``factor`` unless the rope type already
  counts it (YaRN variants, ``longrope``, ``llama3``, ``su``, ``deepseek_llama_scaling``).

And from v0.33.0 only, ``config/speculative.py``: a draft's ``max_position_embeddings`` is raised to the target's
length only when every rope type it uses merely sizes the rotary cache (``_CACHE_ONLY_ROPE_TYPES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, Param, words
from eaglequant.common.json_fields import JsonRecord

CACHE_ONLY_ROPE_TYPES = frozenset({"default", "linear", "llama3", "ntk", "proportional"})
# Rope types whose rotary embedding vLLM builds from original_max_position_embeddings and the factor, never from
# max_position_embeddings (model_executor/layers/rotary_embedding/__init__.py::get_rope): raising the latter changes
# the served length only.
LENGTH_ONLY_ROPE_TYPES = CACHE_ONLY_ROPE_TYPES | {"yarn", "deepseek_yarn"}
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


def only_sizes_cache(config: dict[str, Any]) -> bool:
    """Whether every rope type of the config only sizes the rotary cache (vLLM 0.33 then raises a draft's length)."""
    return all(rope_type in CACHE_ONLY_ROPE_TYPES for rope_type in rope_types(config))


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


@dataclass(frozen=True)
class ConfigChange(JsonRecord):
    """A config.json value a conversion wrote other than the source's, and why (verify holds DST to it)."""

    key: str  # dotted path: "max_position_embeddings", "transformer_layer_config.max_position_embeddings"
    source: Any
    written: Any
    reason: str

    def apply(self, config: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``config`` with this change made."""
        *parents, leaf = self.key.split(".")
        changed = dict(config)
        holder = changed
        for name in parents:
            holder[name] = dict(holder[name])
            holder = holder[name]
        holder[leaf] = self.written
        return changed


def changed_config(config: dict[str, Any], changes: list[ConfigChange]) -> dict[str, Any]:
    """A copy of ``config`` with every change made, in order."""
    for change in changes:
        config = change.apply(config)
    return config


def target_context_change(head_config: dict[str, Any], target_context: int | None) -> ConfigChange | None:
    """The draft's ``max_position_embeddings`` raised to the target's served length (None: already as long). Refused
    where the target's length is unknown, or where the draft's rope is built from max_position_embeddings (raising it
    would move the draft's positions)."""
    if target_context is None:
        raise InputError(
            words(Param("match_target_context"), " needs the target's context length"),
            hint=words("pass ", Param("target_config"), " with the target model's config.json"),
        )
    config = draft_config(head_config)
    moved = [rope for rope in rope_types(config) if rope not in LENGTH_ONLY_ROPE_TYPES]
    if moved:
        why = f": the draft's {moved[0]} rope"
        raise InputError(
            words(Param("match_target_context"), why + " is built from its max_position_embeddings"),
            hint="raising it would change the draft's positions; serve with VLLM_USE_V2_MODEL_RUNNER=0 instead",
        )
    length = served_length(config)
    if length is not None and length >= target_context:
        return None
    prefix = "transformer_layer_config." if config is not head_config else ""
    return ConfigChange(
        f"{prefix}max_position_embeddings",
        config.get("max_position_embeddings"),
        target_context,
        f"the target serves {target_context} positions; vLLM 0.33 would lower that to the draft's {length} "
        "(its rope keeps max_position_embeddings, which sizes only the served length here)",
    )
