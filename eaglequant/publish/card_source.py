"""What a model card takes from the source head: its card's metadata (the licence, the target it names as
``base_model``) and the speculators verifier, gathered into the :class:`CardContext` the card is rendered with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglequant.common.findings import Finding
from eaglequant.record.report import CardContext

CARD_NAME = "README.md"  # the model card, in the source and in every converted checkpoint
# Licence keys the Hub reads from a card's metadata; carried over from the source card unchanged.
LICENSE_KEYS = ("license", "license_name", "license_link")


def source_card_metadata(source: Path, notes: list[Finding] | None = None) -> dict[str, Any]:
    """The YAML metadata of the source's README.md ({} when it has none). A metadata block that is not YAML does not
    stop a conversion: it is left out, and ``notes`` gains a finding (``source-card-unreadable``, about the card)
    saying that the licence it may hold is not carried over."""
    import yaml
    from huggingface_hub.repocard import metadata_load

    card = source / CARD_NAME
    try:
        data = metadata_load(card) if card.is_file() else None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        text = (
            f"{card}: its metadata block cannot be read ({why}), so the card carries no licence from it; fix the "
            "block and convert again, or add the licence to the written card"
        )
        if notes is not None:
            notes.append(Finding("source-card-unreadable", str(card), text))
        return {}
    return data if isinstance(data, dict) else {}


def card_context(
    source_meta: dict[str, Any], head_config: dict[str, Any], base_model: str | None, draft: str
) -> CardContext:
    """What the card needs beyond the report: who the draft is, the target it serves, the licence."""
    licence = {k: source_meta[k] for k in LICENSE_KEYS if isinstance(source_meta.get(k), str)}
    return CardContext(base_model, draft, target_model(head_config, source_meta), licence)


def target_model(head_config: dict[str, Any], source_meta: dict[str, Any]) -> str | None:
    """The target model the draft was trained for: the speculators verifier, else the source card's
    ``base_model`` (an EAGLE head's card names its target there)."""
    verifier = (head_config.get("speculators_config") or {}).get("verifier") or {}
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if isinstance(name, str) and name:
        return name
    base = source_meta.get("base_model")
    if isinstance(base, list) and base:
        base = base[0]
    return base if isinstance(base, str) and base else None
