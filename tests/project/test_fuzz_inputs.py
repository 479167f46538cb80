"""Fuzzing the index and config parsing through the library API (a small budget; scripts/fuzz.py runs
the same properties for longer): damaged ``model.safetensors.index.json`` and ``config.json`` files are
either accepted or refused with the tool's own error, never with another exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fuzzing import (
    REAL_INDEX,
    SHARDS,
    WEIRD_NAMES,
    Workspace,
    check_config,
    check_index,
    configs,
    indexes,
    plan_options,
)

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def test_the_real_index_and_configs_are_accepted(workspace: Workspace) -> None:
    """The properties below are not vacuous: undamaged inputs get past every check."""
    from eaglequant import api

    check_index(workspace, REAL_INDEX, ascii_only=True)
    assert api.inspect(workspace.fixture("sharded-split")).files == SHARDS


@pytest.mark.parametrize("name", WEIRD_NAMES)
def test_every_weird_shard_name(workspace: Workspace, name: str) -> None:
    index = {**REAL_INDEX, "weight_map": {**REAL_INDEX["weight_map"], "fc.weight": name}}
    check_index(workspace, index, ascii_only=False)


@FUZZ
@given(index=indexes, ascii_only=st.booleans())
@example(index={"weight_map": {"fc.weight": "a\0b"}}, ascii_only=True)
@example(index={"weight_map": {"fc.weight": "x" * 300}}, ascii_only=True)
@example(index={"weight_map": {"fc.weight": "\ud800"}}, ascii_only=False)
@example(index=[], ascii_only=True)
def test_fuzz_index(workspace: Workspace, index: Any, ascii_only: bool) -> None:
    check_index(workspace, index, ascii_only)


@FUZZ
@given(case=configs(), ascii_only=st.booleans(), options=plan_options)
@example(case=("specforge-llama", {"hidden_size": True}), ascii_only=True, options={})
@example(
    case=("speculators-llama", {"speculators_model_type": "eagle3", "transformer_layer_config": [1]}),
    ascii_only=True,
    options={},
)
def test_fuzz_config(workspace: Workspace, case: tuple[str, Any], ascii_only: bool, options: dict[str, Any]) -> None:
    fixture, config = case
    check_config(workspace, fixture, config, ascii_only, options)
