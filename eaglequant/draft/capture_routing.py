"""The routing a capture file records of a MoE target (its header's ``routing`` entry), and the routing locality
measured from it: the record :class:`~eaglequant.draft.capture_file.CaptureSummary` carries and the speed-up
model reads (:mod:`eaglequant.capturing.routing` measures it, and says how).

The entry holds counts, never the experts each token chose: for each prompt, the experts its consecutive
generated tokens shared (summed over MoE layers and pairs) and its token pairs; for each MoE layer, the experts
shared over all prompts; and the experts E and the k each token is routed to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.json_fields import JsonRecord, named, rounded

METADATA_KEY = "routing"  # the capture file header's entry holding the counts
_RUN = "capture a MoE target with transformers: `eaglequant capture --target T --draft DRAFT OUT`"


def _rounded_all(values: tuple[float, ...]) -> list[float]:
    return [round(value, 4) for value in values]


@dataclass(frozen=True)
class RoutingLocality(JsonRecord):
    """Rho measured from the target's router, with its 95% interval over prompts and what it rests on."""

    json_values = named(estimate=rounded(4), low=rounded(4), high=rounded(4), layers=_rounded_all)

    estimate: float  # within 0 to 1, the model's range
    low: float
    high: float
    token_pairs: int  # consecutive generated tokens paired, over all prompts (each read at every MoE layer)
    prompts: int
    experts: int
    experts_per_token: int
    layers: tuple[float, ...] = ()  # each MoE layer's own rho, in layer order
    measured_by: str = "capture"

    def text(self) -> str:
        """``routing locality 0.37 [0.31, 0.43], measured by capture on 1,234 token pairs (8 prompts, 2 MoE layers
        of 8 experts, top 2)``."""
        return (
            f"routing locality {self.estimate:.2f} [{self.low:.2f}, {self.high:.2f}], measured by {self.measured_by} "
            f"on {self.token_pairs:,} token pairs ({self.prompts} prompts, {len(self.layers)} MoE layers of "
            f"{self.experts} experts, top {self.experts_per_token})"
        )


@dataclass
class RoutingCounts:
    """A capture's routing, reduced as each sequence is captured (:meth:`add`)."""

    experts: int
    experts_per_token: int
    layer_ids: tuple[int, ...]  # the decoder layers whose router was read
    prompt_shared: list[int] = field(default_factory=list)  # each prompt's shared experts, over layers and pairs
    prompt_pairs: list[int] = field(default_factory=list)  # each prompt's consecutive generated tokens paired
    layer_shared: list[int] = field(default_factory=list)  # each layer's shared experts, over prompts and pairs

    def add(self, ids: Mapping[int, Any], first: int) -> None:
        """One sequence: ``ids`` layer -> the top-k ids [tokens, k] its forward chose, paired from position
        ``first`` on."""
        import torch

        shared = []
        for layer in self.layer_ids:
            chosen = torch.zeros(ids[layer].shape[0], self.experts, dtype=torch.bool)
            chosen.scatter_(1, ids[layer].to(torch.int64), True)
            chosen = chosen[first:]
            shared.append(int((chosen[:-1] & chosen[1:]).sum()))
        self.prompt_shared.append(sum(shared))
        self.prompt_pairs.append(max(int(ids[self.layer_ids[0]].shape[0]) - first - 1, 0))
        self.layer_shared = [a + b for a, b in zip(self.layer_shared or [0] * len(shared), shared, strict=True)]

    def to_metadata(self) -> str:
        return json.dumps(
            {
                "experts": self.experts,
                "experts_per_token": self.experts_per_token,
                "layer_ids": list(self.layer_ids),
                "prompt_shared": self.prompt_shared,
                "prompt_pairs": self.prompt_pairs,
                "layer_shared": self.layer_shared,
            }
        )


def has_routing(path: Path) -> bool:
    """Whether the safetensors file at ``path`` records routing counts (False for any file that is not one)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            return METADATA_KEY in (handle.metadata() or {})
    except (SafetensorError, OSError):
        return False


def read_counts(path: Path, parameter: str = "routing_locality") -> RoutingCounts:
    """The routing counts the capture file at ``path`` holds; one line where it holds none (a dense target, a
    capture through the engine or from trainers' files) or is not a capture file."""
    from safetensors import SafetensorError, safe_open

    where = given(parameter, str(path))
    if not path.is_file():
        raise InputError(words(where, ": no such file"), hint="give a capture file: eaglequant capture OUT")
    try:
        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata() or {}
    except SafetensorError:
        raise InputError(words(where, ": not a safetensors capture file"), hint=_RUN) from None
    if METADATA_KEY not in metadata:
        raise InputError(
            words(where, ": records no routing (capture measures it where it runs a MoE target with transformers)"),
            hint=_RUN,
        )
    try:
        data = json.loads(metadata[METADATA_KEY])
        return RoutingCounts(
            int(data["experts"]), int(data["experts_per_token"]), tuple(int(i) for i in data["layer_ids"]),
            [int(v) for v in data["prompt_shared"]], [int(v) for v in data["prompt_pairs"]],
            [int(v) for v in data["layer_shared"]],
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        raise InputError(words(where, f": its {METADATA_KEY!r} entry is not routing counts"), hint=_RUN) from None
