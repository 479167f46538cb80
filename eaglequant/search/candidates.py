"""A search's candidates: each built-in scheme in each format, with ``lm_head`` kept, quantized in that scheme or in
another of its own, and each draft vocabulary; each priced from headers (the weight bytes a round reads, the largest
over the targeted engines) or skipped for a stated reason.

Each candidate's plan is built, as ``convert`` builds it (from headers: no tensor is read), and search predicts no
refusal of its own: what a targeted engine cannot load is the plan's refusal, caught (:class:`EngineRefusal`: the
scheme in the format, lm_head's own scheme, lm_head run unquantized, a linear it needs quantized kept; each the
engine's decision), as are the other named refusals a candidate may meet: lm_head's own scheme the format cannot
store it in, rules that need the target's layer count, a format that stores none of the head's linears in the
scheme. Any other error is not a candidate's (a release that cannot build the head at all refuses every candidate
alike): it surfaces.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

from eaglequant.common.findings import Finding
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.plan import build_plan
from eaglequant.conversion.request import ConversionRequest
from eaglequant.engines.exclusions import LayerCountNeededError, NothingQuantizedError
from eaglequant.engines.refusal import EngineRefusal, Refusal, Refused
from eaglequant.engines.support import ModuleSchemesNeedLayerCount, UnstorableRule
from eaglequant.formats import FORMATS
from eaglequant.layouts.head import HeadDescription
from eaglequant.readback.cost import RoundCost
from eaglequant.schemes.model import Scheme


@dataclass(frozen=True)
class Candidate:
    """One whole-draft choice, and, once priced, the options and the one :class:`ConversionRequest` made from them:
    what was priced is what a search writes (:meth:`SearchOutputs.converted`)."""

    scheme: str
    format: str
    lm_head: bool  # quantized too
    vocab: int | None  # the pruned draft vocabulary; None: as the source has it
    lm_head_scheme: str | None = None  # lm_head's own scheme (a per-module config); None: the decoder's
    options: ConversionOptions | None = field(default=None, compare=False, repr=False)
    request: ConversionRequest | None = field(default=None, compare=False, repr=False)
    round_cost: RoundCost | None = field(default=None, compare=False, repr=False)  # the largest over the engines

    @property
    def label(self) -> str:
        own = f" {self.lm_head_scheme}" if self.lm_head_scheme else ""
        return (
            f"{self.scheme} / {self.format}"
            + (f" + lm_head{own}" if self.lm_head else "")
            + ("" if self.vocab is None else f", vocab {self.vocab}")
        )

    def settings(self) -> dict[str, Any]:
        """Its settings beyond the scheme and format, as ``convert`` takes them (the vocabulary aside)."""
        if self.lm_head_scheme:
            return {"scheme_for": [f"lm_head={self.lm_head_scheme}"]}
        return {"quantize": ["lm_head"] if self.lm_head else []}

    def requested(self, head: HeadDescription, engines: tuple[str, ...], target_layers: int | None) -> Candidate:
        """The candidate with its options (one worker: the predictions have the other cores) and the request made
        from them for ``head`` (the source, or its pruned vocabulary), as ``convert`` makes it."""
        options = ConversionOptions(
            scheme=self.scheme, format=self.format, engines=engines, target_layers=target_layers, workers=1,
            **self.settings(),
        )  # fmt: skip
        return replace(self, options=options, request=ConversionRequest.of(options, head.config))


def priced_candidates(
    head: HeadDescription,
    schemes: dict[str, Scheme],
    engines: list[str],
    sizes: list[int | None],
    target_layers: int | None,
) -> tuple[list[tuple[Candidate, int]], dict[Finding, int]]:
    """Every candidate of ``schemes`` (name -> scheme) the targeted engines load, with the bytes a round reads
    (largest over the engines), smallest first (ties by name); and the others, counted by why their plan refused
    them (:func:`_round_cost`)."""
    from eaglequant.vocabulary.pruned_head import pruned_description

    described = {size: head if size is None else pruned_description(head, size) for size in sizes}
    loaded = schemes
    own_head = head.find_linear("lm_head") is not None
    priced, skipped = [], Counter[Finding]()
    for name, fmt, size in product(loaded, FORMATS.values(), sizes):
        if not fmt.supports(loaded[name]):
            continue
        own_schemes = [other for other in loaded if other != name and fmt.stores_mixed and fmt.supports(loaded[other])]
        options = [Candidate(name, fmt.name, False, size)]
        options += [Candidate(name, fmt.name, True, size, other) for other in [None, *own_schemes] if own_head]
        for option in options:
            candidate = option.requested(described[size], tuple(engines), target_layers)
            assert candidate.request is not None
            cost = _round_cost(described[size], candidate.request)
            if isinstance(cost, Finding):
                skipped[cost] += 1
            else:
                priced.append((replace(candidate, round_cost=cost), cost.bytes_per_round))
    return sorted(priced, key=lambda pair: (pair[1], pair[0].label)), dict(skipped)


NEEDS_LAYER_COUNT = Finding("needs-layer-count", "", "the target's layer count is needed (--target-layers)")


def _round_cost(head: HeadDescription, request: ConversionRequest) -> RoundCost | Finding:
    """What a round of the candidate ``request`` asks for reads in the engine that reads the most; or, where its plan
    refuses it for a targeted engine (:class:`EngineRefusal`), cannot store lm_head in its own scheme, needs the
    target's layer count for its rules, or stores none of the head's linears, why not. A release that cannot build
    the head at all refuses every candidate alike: that refusal, like any other error, is the search's."""
    try:
        plan = build_plan(head, request)
    except EngineRefusal as refused:
        if refused.refusal.refused is Refused.HEAD:
            raise
        return _skipped(refused.refusal)
    except UnstorableRule as unstorable:
        if unstorable.module != "lm_head":
            raise
        return Finding("lm-head-unstorable", "lm_head", "the format cannot store lm_head in its own scheme")
    except (ModuleSchemesNeedLayerCount, LayerCountNeededError):
        return NEEDS_LAYER_COUNT
    except NothingQuantizedError:
        return Finding("nothing-quantized", "", "the format stores none of the head's linears in that scheme")
    return max(plan.round_costs(), key=lambda cost: cost.bytes_per_round)


# What a release refuses -> the code search counts the candidate under, and its words (a candidate's only rule
# is lm_head's: the module a release runs unquantized, the module whose own scheme it does not read; a linear it
# needs quantized is kept by the format, which cannot store it in the scheme, or by a default).
SKIPPED: dict[Refused, tuple[str, str]] = {
    Refused.SCHEME: ("engine-does-not-load", "{engine} does not load the scheme in that format"),
    Refused.MODULE_KINDS: ("lm-head-scheme-unread", "{engine} does not read lm_head's own scheme in that format"),
    Refused.MODULE: ("lm-head-unquantized", "{engine} runs {module} unquantized in that format"),
    Refused.KEPT: ("engine-needs-quantized", "{engine} cannot load {module} unquantized, as the candidate keeps it"),
}


def _skipped(refusal: Refusal) -> Finding:
    """A candidate the plan refuses for ``refusal``, as search counts it: by what the release refuses."""
    code, said = SKIPPED[refusal.refused]
    return Finding(code, refusal.engine.key, said.format(engine=refusal.engine.titled, module=refusal.module))
