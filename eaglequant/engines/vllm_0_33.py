"""vLLM 0.33.0: the 0.32.0 release (``vllm.py``) with what changed since, for a draft that loads "fine".

Read side by side with v0.32.0, everything that parses or loads an EAGLE-3 draft is the same file
(``llama_eagle3.py``, ``deepseek_eagle3.py``, the Quark, compressed-tensors and fp8 configs,
``get_draft_quant_config``, every exclusion matcher), so the support matrix's cells and the exclusion dialects
are 0.32.0's. What changed serves a correct checkpoint differently, without an error (sources: vllm-project/vllm,
v0.33.0):

- ``config/speculative.py::_maybe_override_draft_max_position_embeddings`` raises a draft's
  ``max_position_embeddings`` to the target's length only when its rope types all merely size the rotary cache
  (``_CACHE_ONLY_ROPE_TYPES``: default, linear, llama3, ntk, proportional). A ``yarn`` / ``deepseek_yarn`` /
  ``dynamic`` / ``longrope`` draft keeps its own, and under Model Runner V2 (0.33's default where Triton runs)
  ``config/vllm.py::_limit_max_model_len_to_draft`` lowers the *served* max_model_len to the draft's.
- ``transformers_utils/config.py::maybe_override_with_speculators``: ``vllm serve DRAFT`` of a speculators-format
  head requires ``speculators_config.verifier.name_or_path`` to be a Hub repo id ("Speculators verifier must
  name a remote model repository"); a local path is refused, even one that exists.
- ``quantization/modelopt.py::ModelOptQuantConfigBase.from_config`` reads config.json's ``ignore``, falling
  back to ``exclude_modules`` (0.32.0 silently ignored an inline ``exclude_modules``); eaglequant writes
  ``ignore``, which both read.
- ``envs.py``: ``VLLM_ROCM_USE_AITER_FP8BMM`` / ``FP4BMM`` default to false, so an MLA draft's kv_b_proj runs as
  stored on ROCm (0.32.0's note does not apply).
- ``config/speculative.py::draft_lm_head_quantization`` (``fp8`` | ``nvfp4``, Model Runner V2 only): the drafter's
  copy of a target lm_head it shares is quantized online (``v1/worker/gpu/spec_decode/eagle/utils.py``); a draft
  with its own lm_head is refused there ("needs a drafter that shares the target lm_head"). And
  ``use_aux_hidden_state: false`` is honoured on Model Runner V2 too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.common.config_change import ConfigChange
from eaglequant.common.errors import InputError, Param, words
from eaglequant.common.findings import Finding
from eaglequant.engines.cells import Cells
from eaglequant.engines.served_length import draft_config, rope_types, served_length
from eaglequant.engines.vllm import CELLS as RELEASE_0_32_CELLS
from eaglequant.engines.vllm import VllmEngine
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention

if TYPE_CHECKING:
    from eaglequant.engines.target import TargetModel
    from eaglequant.layouts.head import HeadDescription

# Where the sources (config/speculative.py, config/vllm.py) are named and the behaviour explained.
_CONTEXT_DOCS = "docs/engines.md#vllm-releases-0320-and-0330"
# config/speculative.py::_CACHE_ONLY_ROPE_TYPES: a draft whose rope types are all these has its
# max_position_embeddings raised to the target's length.
CACHE_ONLY_ROPE_TYPES = frozenset({"default", "linear", "llama3", "ntk", "proportional"})
# Rope types whose rotary embedding vLLM builds from original_max_position_embeddings and the factor, never from
# max_position_embeddings (model_executor/layers/rotary_embedding/__init__.py::get_rope): raising the latter changes
# the served length only.
LENGTH_ONLY_ROPE_TYPES = CACHE_ONLY_ROPE_TYPES | {"yarn", "deepseek_yarn"}


def only_sizes_cache(config: dict[str, Any]) -> bool:
    """Whether every rope type of the config only sizes the rotary cache (vLLM 0.33 then raises a draft's length)."""
    return all(rope_type in CACHE_ONLY_ROPE_TYPES for rope_type in rope_types(config))


def shorter_context(head_config: dict[str, Any], target: TargetModel) -> Finding | None:
    """Why vLLM 0.33 would serve the target with a shorter context than its own because of this draft, with the
    fix (``shorter-context``, or ``may-shorten-context`` without the target's length), about the draft's
    max_position_embeddings; None when it would not (or cannot tell: no length in the draft's config)."""
    config = draft_config(head_config)
    if only_sizes_cache(config):
        return None
    length = served_length(config)
    if length is None or (target.context is not None and length >= target.context):
        return None
    rope = "/".join(dict.fromkeys(rope_types(config)))
    if target.context is None:
        text = (
            f"vLLM 0.33 may serve the target with this draft's shorter context, {length}: its {rope} rope keeps its "
            f"max_position_embeddings ({_CONTEXT_DOCS}); pass --target-config with the target's config.json to check"
        )
        return Finding("may-shorten-context", "max_position_embeddings", text)
    text = (
        f"vLLM 0.33 serves the target with max_model_len {length}, not its {target.context}: this draft's {rope} "
        f"rope keeps its max_position_embeddings ({_CONTEXT_DOCS}); convert with --match-context, or serve with "
        "VLLM_USE_V2_MODEL_RUNNER=0"
    )
    return Finding("shorter-context", "max_position_embeddings", text)


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


def local_verifier(head_config: dict[str, Any]) -> Finding | None:
    """Why ``vllm serve DRAFT`` fails on 0.33 for a speculators head whose verifier is not a Hub repo id."""
    speculators = head_config.get("speculators_config")
    verifier = speculators.get("verifier") if isinstance(speculators, dict) else None
    if not isinstance(verifier, dict) or "name_or_path" not in verifier:
        return None
    name = verifier["name_or_path"]
    if isinstance(name, str) and _hub_repo_id(name):
        return None
    return Finding(
        "local-verifier",
        "speculators_config.verifier.name_or_path",
        f"vLLM 0.33 refuses `vllm serve DRAFT` for this speculators head: its verifier {name!r} is not a Hub repo id "
        "(transformers_utils/config.py::maybe_override_with_speculators: 'Speculators verifier must name a remote "
        "model repository'); serve the target with --speculative-config naming the draft, or set "
        "speculators_config.verifier.name_or_path to the target's Hub repo id",
    )


def shared_lm_head(head: HeadDescription) -> Finding | None:
    """How a draft that reads the target's lm_head can read fewer bytes a round on 0.33 (None: it has its own)."""
    if head.find_linear("lm_head") is not None:
        return None
    return Finding(
        "shared-lm-head",
        "lm_head",
        "this draft reads the target's lm_head: vLLM 0.33 can quantize the drafter's copy of it online with "
        '--speculative-config \'{..., "draft_lm_head_quantization": "fp8"}\' (or "nvfp4", weight-only; Model '
        "Runner V2 only; config/speculative.py), which cuts the lm_head's share of a round's bytes; the target "
        "verifies with its own, so only acceptance can change: measure it",
    )


def _hub_repo_id(name: str) -> bool:
    """vLLM's test: huggingface_hub's validate_repo_id passes and nothing exists at that path."""
    from pathlib import Path

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    path = Path(name)
    return not (path.exists() or path.is_symlink())


class Vllm033Engine(VllmEngine):
    key: ClassVar[str] = "vllm==0.33.0"
    release: ClassVar[str] = "0.33.0"
    cells: ClassVar[Cells] = RELEASE_0_32_CELLS
    measures_acceptance: ClassVar[bool] = False  # eaglequant runs vLLM 0.32.0 only
    captures_hidden_states: ClassVar[bool] = False

    def environment_notes(self, attention: Attention, kinds: KindPair, fmt: Format) -> list[Finding]:
        return []

    def draft_notes(self, head: HeadDescription, target: TargetModel) -> list[Finding]:
        found = (shorter_context(head.config, target), local_verifier(head.config), shared_lm_head(head))
        return [note for note in found if note is not None]

    def context_change(self, head_config: dict[str, Any], target: TargetModel) -> ConfigChange | None:
        return target_context_change(head_config, target.context)
