"""The target's layer count (vLLM names draft layer i model.layers.{L+i}): where it comes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglequant import inspect
from eaglequant.common.errors import InputError
from tests.conftest import FIXTURES, run_cli

KIMI_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"num_hidden_layers": 61}}


def _write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _speculators_head(tmp_path: Path, verifier: str) -> Path:
    head = shutil.copytree(FIXTURES / "speculators-llama", tmp_path / "head")
    config = json.loads((head / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = verifier
    (head / "config.json").write_text(json.dumps(config))
    return head


@pytest.mark.parametrize("as_directory", [False, True])
def test_target_config_gives_the_layer_count(tmp_path: Path, as_directory: bool) -> None:
    config = _write(tmp_path / "kimi" / "config.json", KIMI_TARGET)
    plan = inspect(
        FIXTURES / "multi-layer", exclude=["layers.1.mlp.*"], target_config=config.parent if as_directory else config
    ).plan
    assert plan.target.count == 61 and "--target-config" in plan.target.source
    assert r"re:^model\.layers\.62\.mlp\.down_proj$" in plan.exclude_patterns  # draft layer 1 = 61 + 1


def test_speculators_verifier_on_disk_gives_the_layer_count(tmp_path: Path) -> None:
    verifier = _write(tmp_path / "llama-8b" / "config.json", {"num_hidden_layers": 32}).parent
    plan = inspect(_speculators_head(tmp_path, str(verifier))).plan
    assert plan.target.count == 32 and "verifier" in plan.target.source
    assert plan.verdicts[2].runtime_name.startswith("model.layers.32.")


def test_speculators_verifier_in_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--meta-llama--Llama-3.1-8B-Instruct"
    _write(repo / "snapshots" / "0123abc" / "config.json", {"num_hidden_layers": 32})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    plan = inspect(_speculators_head(tmp_path, "meta-llama/Llama-3.1-8B-Instruct")).plan
    assert plan.target.count == 32


def test_unknown_verifier_leaves_the_count_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    plan = inspect(FIXTURES / "speculators-llama").plan
    assert plan.target.count is None and plan.verdicts[2].runtime_name.startswith("model.layers.{L}.")


def test_sources_that_disagree_are_refused(tmp_path: Path) -> None:
    verifier = _write(tmp_path / "llama-8b" / "config.json", {"num_hidden_layers": 32}).parent
    with pytest.raises(InputError, match=r"ambiguous: --target-layers says 61, the head.s verifier .* says 32"):
        inspect(_speculators_head(tmp_path, str(verifier)), target_layers=61)


@pytest.mark.parametrize(
    ("config", "message"),
    [({"text_config": {}}, "has no num_hidden_layers"), ({"num_hidden_layers": "61"}, "expected a positive integer")],
)
def test_unusable_target_config_is_one_line(tmp_path: Path, config: dict, message: str) -> None:
    path = _write(tmp_path / "target.json", config)
    result = run_cli("inspect", FIXTURES / "specforge-llama", "--target-config", path)
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.stderr
