"""One config.json value a conversion writes other than the source's, and why: made by the engine release that needs
it (vLLM 0.33's ``--match-context``), applied by the conversion, recorded in the report, and allowed by ``verify``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglequant.common.json_fields import JsonRecord


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
