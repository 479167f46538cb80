"""The target model as a draft's conversion needs it (:class:`TargetModel`): its layer count, which vLLM adds to the
draft's layer index to name its modules, and, when a target config was read, its context length.

vLLM builds draft layer ``i`` at ``model.layers.{L + i}`` with L = the target's
``get_total_num_hidden_layers()`` (``vllm/model_executor/models/llama_eagle3.py``,
``deepseek_eagle3.py``), i.e. the target config's ``num_hidden_layers`` (``text_config`` first, for
multimodal targets such as Kimi-K2.5). Sources, strongest first: ``--target-layers``, ``--target-config``,
and the head's own config when it names its verifier (speculators) and that verifier's config.json is
on disk (a local directory, or the Hugging Face cache; never downloaded). Two sources that disagree
are an error. When none is known, exclusion rules are written to hold for any L.

A target config read on the way (``--target-config``, the verifier's) also gives the context length vLLM serves the
target with (:func:`eaglequant.engines.served_length.served_length`), which a draft may lower (``vllm_0_33.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.reader import load_json_object
from eaglequant.common.errors import InputError, Param, words
from eaglequant.common.json_fields import JsonRecord


@dataclass(frozen=True)
class TargetModel(JsonRecord):
    """The target's layer count and context length, each None when unknown."""

    count: int | None
    source: str  # where the count came from, in words
    context: int | None = None  # the target's max_model_len as vLLM derives it, when a target config was read

    def recorded(self) -> TargetModel:
        """The count as a written checkpoint's report states it (unchanged when unknown)."""
        if self.count is None:
            return self
        return TargetModel(self.count, f"recorded in {REPORT_NAME}: {self.source}", self.context)


UNKNOWN = TargetModel(None, "unknown: rules are written for any target layer count")


def layer_count(config: dict[str, Any], where: str) -> int:
    """``num_hidden_layers`` of a target config (its ``text_config`` first)."""
    for holder in (config.get("text_config"), config):
        if isinstance(holder, dict) and "num_hidden_layers" in holder:
            value = holder["num_hidden_layers"]
            if type(value) is not int or value <= 0:
                raise InputError(f"{where}: num_hidden_layers is {value!r}; expected a positive integer")
            return value
    raise InputError(f"{where}: has no num_hidden_layers", hint="pass the target model's config.json")


def read_target_config(path: Path) -> tuple[int, int | None]:
    """The target's layer count and served context length, from its config.json (or the directory holding it)."""
    from eaglequant.engines.served_length import served_length

    file = path / "config.json" if path.is_dir() else path
    config = load_json_object(file, "target config")
    return layer_count(config, str(file)), served_length(config)


def verifier_config(head_config: dict[str, Any]) -> Path | None:
    """config.json of the verifier a speculators head names, when it is on disk."""
    speculators = head_config.get("speculators_config")
    verifier = speculators.get("verifier") if isinstance(speculators, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if not isinstance(name, str) or not name:
        return None
    local = Path(name).expanduser()
    try:
        if (local / "config.json").is_file():
            return local / "config.json"
    except OSError:  # a name no file system holds (too long, say): not on disk, so perhaps a repo id
        pass
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except HFValidationError:  # neither a directory on disk nor a Hub repo id: nothing cached under it
        return None
    return Path(cached) if isinstance(cached, str) else None


def resolve_target(explicit: int | None, target_config: str | Path | None, head_config: dict[str, Any]) -> TargetModel:
    found: list[TargetModel] = []
    if explicit is not None:
        if explicit < 1:
            raise InputError(
                words(Param("target_layers"), f" must be >= 1, not {explicit}"),
                hint="N is the target model's num_hidden_layers (in its config.json)",
            )
        found.append(TargetModel(explicit, "--target-layers"))
    if target_config is not None:
        count, context = read_target_config(Path(target_config))
        found.append(TargetModel(count, f"--target-config {target_config}", context))
    verifier = verifier_config(head_config)
    if verifier is not None:
        count, context = read_target_config(verifier)
        found.append(TargetModel(count, f"the head's verifier ({verifier})", context))
    counts = {t.count for t in found}
    if len(counts) > 1:
        said = ", ".join(f"{t.source} says {t.count}" for t in found)
        raise InputError(f"the target's layer count is ambiguous: {said}", hint="make them agree, or drop one")
    if not found:
        return UNKNOWN
    context = next((t.context for t in found if t.context is not None), None)
    return TargetModel(found[0].count, found[0].source, context)
