"""Whether a draft head fits the target it is priced against: the hidden states it reads are the target's width,
its vocabulary maps into the target's (``d2t`` maps a draft token to a target token), and every layer it reads a
hidden state from is one of the target's. A draft that does not fit is refused in one line before anything is
priced: the speed-up of a draft its target cannot serve is no figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError
from eaglequant.layouts.detect import dims_source


def _aux_layer_ids(config: dict[str, Any]) -> list[int]:
    for holder in (config.get("eagle_config"), config):
        ids = holder.get("eagle_aux_hidden_state_layer_ids") if isinstance(holder, dict) else None
        if isinstance(ids, list) and ids:
            return [i for i in ids if isinstance(i, int)]
    return []


def _positive(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def misfits(draft_config: dict[str, Any], target_config: dict[str, Any]) -> list[str]:
    """What of the draft (its config.json) does not fit the target (its text config), in words; [] when it fits."""
    draft = dims_source(draft_config)
    found = []
    width = _positive(draft, "target_hidden_size") or _positive(draft, "hidden_size")
    target_width = _positive(target_config, "hidden_size")
    if width and target_width and width != target_width:
        found.append(f"it reads hidden states of width {width}, the target's hidden_size is {target_width}")
    target_vocab = _positive(target_config, "vocab_size")
    vocab, draft_vocab = _positive(draft, "vocab_size"), _positive(draft, "draft_vocab_size")
    if target_vocab and vocab and vocab != target_vocab:
        found.append(f"its vocab_size {vocab} is not the target's {target_vocab}")
    if target_vocab and draft_vocab and draft_vocab > target_vocab:
        found.append(f"its draft_vocab_size {draft_vocab} is larger than the target's vocab_size {target_vocab}")
    layers = _positive(target_config, "num_hidden_layers")
    outside = [i for i in _aux_layer_ids(draft_config) if layers and not 0 <= i < layers]
    if outside:
        found.append(f"it reads layers {outside}, and the target has {layers} (eagle_aux_hidden_state_layer_ids)")
    return found


def check_draft_fits(draft: Path | dict[str, Any], target: Path | str) -> None:
    """Refuse, in one line, a draft (a directory with its config.json, or that config) that does not fit the
    target (a checkpoint directory or its config.json)."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.speedup.target_step import target_config

    draft_config = load_json_object(draft / "config.json", "config.json") if isinstance(draft, Path) else draft
    config, where = target_config(Path(target))
    found = misfits(draft_config, config)
    if found:
        named = f"the draft {draft}" if isinstance(draft, Path) else "the draft"
        raise InputError(
            f"{named} does not fit the target {where}: {'; '.join(found)}",
            hint="price the draft against the target it was trained for",
        )
