"""A conversion's plan asks each part one time and hands the answers on as data: the support matrix is asked once
(``engines.support.engine_support``), the format once (``Format.storage``), and what follows reads their answers
instead of asking again. Following ``api.convert``'s options through the calls then enters each module once, but
the conversion job, which composes the steps. An import here would be a second question.

The options cross from the API to the plan as one ``ConversionRequest``, every name in them resolved once (by
``ConversionOptions``): the plan holds the request's format and engine objects, and no module on the way looks a
format, an engine or a scheme up by its name again."""

from __future__ import annotations

import ast
from typing import Any

import pytest
from test_import_cycles import PACKAGE, import_graph

import eaglequant
import eaglequant.conversion.source
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.request import ConversionRequest
from tests.conftest import FIXTURES

# module that decides -> modules that take its answers as data and must not ask it themselves
ASKED_ONCE = {
    "eaglequant.engines.support": (
        "eaglequant.engines.exclusions",  # the formats every engine loads the scheme in: EngineSupport.loading_formats
        "eaglequant.conversion.plan",  # the engines that do not read per-module kinds: EnginePlan
    ),
    "eaglequant.formats": ("eaglequant.engines.exclusions",),  # what the format cannot store: HeadStorage.problems
    "eaglequant.checkpoint.hashing": ("eaglequant.conversion.options",),  # the digests: conversion.manifest_options
}


@pytest.mark.parametrize(("decider", "takers"), ASKED_ONCE.items())
def test_what_was_decided_once_is_not_asked_again(decider: str, takers: tuple[str, ...]) -> None:
    graph = import_graph()
    asking = [taker for taker in takers if decider in graph[taker]]
    assert asking == [], f"{asking} import {decider}; pass them its answer from the plan instead"


# The modules a request passes through below the API, on its way to the plan and its config, and search's candidates,
# which make their requests the same way.
PLAN_FLOW = (
    "jobs/conversion.py",
    "conversion/source.py",
    "conversion/request.py",
    "conversion/plan.py",
    "engines/planning.py",
    "engines/support.py",
    "engines/support_tables.py",
    "engines/exclusions.py",
    "engines/view.py",
    "engines/base.py",
    "engines/vllm.py",
    "engines/sglang.py",
    "engines/trtllm.py",
    "formats/base.py",
    "search/candidates.py",
    "search/outputs.py",
)
NAME_LOOKUPS = {"get_format", "get_engine", "load_scheme", "FORMATS", "ENGINES"}  # called, or subscripted


def name_lookups(source: str) -> list[str]:
    """Each call of a registry look-up by name in ``source`` (``get_format(...)``, ``ENGINES[...]``), as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        looked_up = node.func if isinstance(node, ast.Call) else node.value if isinstance(node, ast.Subscript) else None
        name = looked_up.id if isinstance(looked_up, ast.Name) else getattr(looked_up, "attr", None)
        if name in NAME_LOOKUPS:
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("module", PLAN_FLOW)
def test_nothing_on_the_way_to_the_plan_looks_a_name_up_again(module: str) -> None:
    assert name_lookups((PACKAGE / module).read_text(encoding="utf-8")) == []


def test_the_check_sees_a_look_up_by_name() -> None:
    assert name_lookups("fmt = get_format(name)\nengine = engines.ENGINES[name]\nf = FORMATS.values()") == [
        "get_format(name)",
        "engines.ENGINES[name]",
    ]


def test_a_conversion_request_crosses_from_the_api_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API hands build_plan one request made from the options, holding the objects the options resolved."""
    options = ConversionOptions(scheme="nvfp4", format="modelopt", engines=["vllm", "sglang"], target_layers=61)
    received: list[ConversionRequest] = []
    build_plan = eaglequant.conversion.source.build_plan

    def spy(head: Any, request: ConversionRequest, **rest: Any) -> ConversionPlan:
        received.append(request)
        return build_plan(head, request, **rest)

    monkeypatch.setattr(eaglequant.conversion.source, "build_plan", spy)
    plan = eaglequant.inspect(FIXTURES / "specforge-llama", options).plan
    (request,) = received
    assert isinstance(request, ConversionRequest)
    assert request.format is options.resolved_format is plan.format
    assert request.engines == options.resolved_engines and list(request.engines) == plan.engines
    assert request.assignment is options.assignment and request.target is plan.target
    assert (request.target.count, request.config_changes) == (61, ())
