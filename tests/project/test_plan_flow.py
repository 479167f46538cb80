"""A conversion's plan asks each part one time and hands the answers on as data: the support matrix is asked once
(``engines.support.engine_support``), the format once (``Format.storage``), and what follows reads their answers
instead of asking again. Following ``api.convert``'s options through the calls then enters each module once, but
the API, which composes the steps. An import here would be a second question."""

from __future__ import annotations

import pytest
from test_import_cycles import import_graph

# module that decides -> modules that take its answers as data and must not ask it themselves
ASKED_ONCE = {
    "eaglequant.engines.support": (
        "eaglequant.engines.exclusions",  # the formats every engine loads the scheme in: EngineSupport.loading_formats
        "eaglequant.conversion.plan",  # the engines that do not read per-module kinds: EnginePlan
    ),
    "eaglequant.formats": ("eaglequant.engines.exclusions",),  # what the format cannot store: HeadStorage.problems
    "eaglequant.checkpoint.hashing": ("eaglequant.conversion.options",),  # the manifest's digests: api.manifest_options
}


@pytest.mark.parametrize(("decider", "takers"), ASKED_ONCE.items())
def test_what_was_decided_once_is_not_asked_again(decider: str, takers: tuple[str, ...]) -> None:
    graph = import_graph()
    asking = [taker for taker in takers if decider in graph[taker]]
    assert asking == [], f"{asking} import {decider}; pass them its answer from the plan instead"
