"""Routing locality measured from the target's own router while ``capture`` runs it (issue 62): how alike a
sequence's consecutive tokens route, the term rho of the speed-up model
(:meth:`eaglequant.speedup.target_step.TargetWeights.distinct_experts`).

The model's routing process: a sequence's first token routes to a uniform top-k set of the E experts; each later
token keeps its predecessor's set with chance rho, else draws a fresh uniform set, independent of the last. With
S_t the set at token t, a fresh set shares k * k / E of S_t's experts in expectation (each of its k experts is in
S_t with chance k / E), a kept one all k, so

    E|S_t ∩ S_(t+1)| / k = rho + (1 - rho) k / E,    rho = (overlap / k - k / E) / (1 - k / E).

Forward hooks on each MoE layer's router (:data:`ROUTERS`, by ``model_type``) read the top-k ids it chose for
every token of the one forward over prompt + continuation; each sequence is reduced at once to the experts its
consecutive generated tokens share, summed over layers and pairs (:class:`RoutingCounts`: a few integers a prompt
and a layer, written in the capture file's header), never the ids themselves. :func:`routing_locality` pools them
into rho with a 95% interval over prompts as clusters (the linearised ratio estimator, Student's t), as acceptance
is pooled (:mod:`eaglequant.measurement.statistics`).

Only the generated tokens are paired: a decode forward (a step or a verification) runs those, never the prompt's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError
from eaglequant.draft.capture_routing import RoutingCounts, RoutingLocality, read_counts
from eaglequant.measurement.statistics import t_quantile


def _last(output: Any, router: Any) -> Any:
    """The top-k ids of transformers' (logits, weights, ids) routers: the last item they return."""
    return output[-1]


def _top_of_logits(output: Any, router: Any) -> Any:
    """Llama 4's router returns (scores, logits): the ids are the logits' top k, as it chose them."""
    return output[1].topk(router.top_k, dim=-1).indices


@dataclass(frozen=True)
class RouterFamily:
    path: str  # the router's module within a decoder layer: model.layers.N.<path>
    ids: Callable[[Any, Any], Any]  # (the router's output, the router) -> top-k ids [tokens, k]


# transformers' MoE families whose routers are read, by model_type; each router module has ``top_k`` and
# ``num_experts``
ROUTERS: Mapping[str, RouterFamily] = {
    "qwen2_moe": RouterFamily("mlp.gate", _last),
    "qwen3_moe": RouterFamily("mlp.gate", _last),
    "mixtral": RouterFamily("mlp.gate", _last),
    "deepseek_v3": RouterFamily("mlp.gate", _last),  # its own top-k within groups
    "glm4_moe": RouterFamily("mlp.gate", _last),
    "gpt_oss": RouterFamily("mlp.router", _last),
    "llama4_text": RouterFamily("feed_forward.router", _top_of_logits),
}
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def routing_locality(counts: RoutingCounts, measured_by: str = "capture") -> RoutingLocality:
    """Rho from ``counts``: the shared experts over the k a pair could share, less the k / E independent routing
    shares, over 1 - k / E; its 95% interval over prompts as clusters (0 to 1 with one prompt). The estimate and
    its bounds are held to the model's 0 to 1 (a router that shares fewer experts than chance reads as 0)."""
    k, experts, layers = counts.experts_per_token, counts.experts, len(counts.layer_ids)
    chance = k / experts
    possible = [k * layers * pairs for pairs in counts.prompt_pairs]
    if not sum(possible):
        raise InputError("routing locality: no two consecutive generated tokens to pair",
                         hint="capture with --max-tokens 2 or more")  # fmt: skip
    share = sum(counts.prompt_shared) / sum(possible)
    used = [(y, n) for y, n in zip(counts.prompt_shared, possible, strict=True) if n]
    m = len(used)
    half = math.inf
    if m >= 2:
        spread = math.sqrt(m / (m - 1) * sum((y - share * n) ** 2 for y, n in used)) / sum(possible)
        half = t_quantile(m - 1) * spread

    def rho(value: float) -> float:
        return min(max((value - chance) / (1.0 - chance), 0.0), 1.0)

    pairs = sum(counts.prompt_pairs)
    per_layer = tuple(rho(shared / (k * pairs)) for shared in counts.layer_shared)
    return RoutingLocality(
        rho(share), rho(share - half), rho(share + half), pairs, m, experts, k, per_layer, measured_by
    )


def is_moe(config: Any) -> bool:
    """Whether a transformers config routes its tokens to experts (more than one, by its family's key)."""
    return any(isinstance(getattr(config, key, None), int) and getattr(config, key) > 1 for key in _EXPERT_KEYS)


class RouterTap:
    """Forward hooks on a transformers model's routers: :meth:`listening` records each MoE layer's top-k ids for
    the forwards it encloses, :meth:`counted` reduces them into :attr:`counts` and lets them go."""

    def __init__(self, model: Any, family: RouterFamily) -> None:
        suffix = "." + family.path
        self.family = family
        self.routers: dict[int, Any] = {}
        for name, module in model.named_modules():
            layer = _layer_of(name, suffix)
            if layer is not None:
                self.routers[layer] = module
        first = next(iter(self.routers.values()))
        self.counts = RoutingCounts(int(first.num_experts), int(first.top_k), tuple(sorted(self.routers)))
        self._ids: dict[int, Any] = {}

    @contextmanager
    def listening(self) -> Iterator[None]:
        handles = [router.register_forward_hook(self._hook(layer)) for layer, router in self.routers.items()]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _hook(self, layer: int) -> Callable[..., None]:
        def record(router: Any, inputs: Any, output: Any) -> None:
            self._ids[layer] = self.family.ids(output, router).detach()

        return record

    def counted(self, first: int) -> None:
        """Reduce the last forward's ids, its tokens paired from position ``first`` (the first generated one)."""
        missing = [layer for layer in self.counts.layer_ids if layer not in self._ids]
        if missing:
            raise RuntimeError(f"the router of layer {missing[0]} did not run in the forward")
        self.counts.add(self._ids, first)
        self._ids = {}


def _layer_of(name: str, suffix: str) -> int | None:
    """N of ``...layers.N<suffix>``, None for another module."""
    if not name.endswith(suffix):
        return None
    head = name[: -len(suffix)]
    number = head.rsplit(".", 1)[-1]
    return int(number) if number.isdigit() and head[: -len(number)].endswith("layers.") else None


def router_tap(model: Any) -> tuple[RouterTap | None, str | None]:
    """The tap on ``model``'s routers, or None and why not in one line (None and None: a dense target, nothing to
    measure)."""
    config = model.config
    if not is_moe(config):
        return None, None
    family = ROUTERS.get(str(config.model_type))
    if family is None:
        return None, (
            f"routing locality not measured: capture reads the routers of {', '.join(ROUTERS)}, not "
            f"{config.model_type}'s"
        )
    if not any(_layer_of(name, "." + family.path) is not None for name, _ in model.named_modules()):
        return None, f"routing locality not measured: no {family.path} router found in {config.model_type}'s layers"
    return RouterTap(model, family), None


def measured_locality(path: Path, parameter: str = "routing_locality") -> RoutingLocality:
    """The routing locality the capture file at ``path`` measured."""
    return routing_locality(read_counts(path, parameter), f"capture ({path.name})")
