"""vLLM releases as engines of their own: how a release is chosen, the context vLLM serves, and 0.33's checks.

What each release's own functions answer is tested in tests/engine_load/test_vllm_config_functions.py; these
tests hold eaglequant's side without an engine installed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from eaglequant import convert, explain, inspect, verify
from eaglequant.common.errors import EXIT_BAD_INPUT, InputError
from eaglequant.common.findings import codes
from eaglequant.engines import ENGINES, get_engine
from eaglequant.engines.served_length import served_length
from eaglequant.engines.target import UNKNOWN, TargetModel
from eaglequant.engines.vllm_0_33 import local_verifier, shorter_context, target_context_change
from eaglequant.record.report import read_report
from tests.conftest import FIXTURES, run_cli

YARN = {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}


def test_a_release_is_chosen_by_name_and_the_bare_name_is_0_32() -> None:
    assert get_engine("vllm").release == "0.32.0"
    assert get_engine("vllm==0.32.0") is get_engine("vllm")
    assert get_engine("vllm==0.33.0").release == "0.33.0"
    with pytest.raises(InputError, match=r"unknown engine 'vllm==0\.31\.0'"):
        get_engine("vllm==0.31.0")


def test_each_release_names_its_engine_plainly_and_is_keyed_by_what_engine_takes() -> None:
    assert {key: (engine.name, engine.release) for key, engine in ENGINES.items()} == {
        "vllm": ("vllm", "0.32.0"),
        "vllm==0.33.0": ("vllm", "0.33.0"),
        "trtllm": ("trtllm", "1.2.x"),
        "sglang": ("sglang", "0.5.23"),
        "trtllm-main": ("trtllm", "(2026)"),
    }
    assert all(engine.key == key and get_engine(key) is engine for key, engine in ENGINES.items())


@pytest.mark.parametrize(
    ("config", "length"),
    [
        ({"max_position_embeddings": 4096}, 4096),
        ({"max_position_embeddings": 4096, "rope_scaling": YARN}, 4096),  # yarn's factor is already counted
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 8192),
        ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "linear", "factor": 4}}, 16384),
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048),  # the smallest length key
        ({"max_position_embeddings": 4096, "model_max_length": 8000}, 8000),  # Command-R's key wins
        ({"text_config": {"max_position_embeddings": 131072}, "max_position_embeddings": 1}, 131072),
        ({"hidden_size": 8}, None),
    ],
)
def test_the_served_length_is_derived_as_vllm_derives_it(config: dict[str, Any], length: int | None) -> None:
    assert served_length(config) == length


def test_only_a_draft_whose_rope_keeps_its_length_is_warned_about() -> None:
    target = TargetModel(61, "--target-config", context=262144)
    assert shorter_context({"max_position_embeddings": 4096}, target) is None  # 0.33 raises a default rope's
    assert shorter_context({"max_position_embeddings": 262144, "rope_scaling": YARN}, target) is None
    short = {"max_position_embeddings": 4096, "rope_scaling": YARN}
    said = shorter_context(short, target)
    assert said is not None and "max_model_len 4096, not its 262144" in said.message
    assert "--match-context" in said.message
    unknown = shorter_context(short, UNKNOWN)
    assert unknown is not None and "pass --target-config" in unknown.message
    # issue 48, item 15: short enough to read, the sources in the docs it names
    for text in (said.message, unknown.message):
        assert len(text) <= 250 and "docs/engines.md#vllm-releases-0320-and-0330" in text, text


def test_matching_the_targets_context_needs_it_and_a_rope_it_does_not_move() -> None:
    short = {"max_position_embeddings": 4096, "rope_scaling": YARN}
    change = target_context_change(short, 262144)
    assert change is not None and (change.key, change.source, change.written) == (
        "max_position_embeddings",
        4096,
        262144,
    )
    assert change.apply(short)["max_position_embeddings"] == 262144 and short["max_position_embeddings"] == 4096
    assert target_context_change(short, 4096) is None  # already as long
    with pytest.raises(InputError, match="needs the target's context length"):
        target_context_change(short, None)
    dynamic = {"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    with pytest.raises(InputError, match="dynamic rope is built from its max_position_embeddings"):
        target_context_change(dynamic, 262144)
    speculators = {"speculators_config": {}, "transformer_layer_config": {**short}}
    nested = target_context_change(speculators, 262144)
    assert nested is not None and nested.key == "transformer_layer_config.max_position_embeddings"
    assert nested.apply(speculators)["transformer_layer_config"]["max_position_embeddings"] == 262144


def test_only_0_33_contributes_the_config_change_that_keeps_the_targets_context() -> None:
    short = {"max_position_embeddings": 4096, "rope_scaling": YARN}
    target = TargetModel(61, "--target-config", context=262144)
    change = get_engine("vllm==0.33.0").context_change(short, target)
    assert change is not None and (change.key, change.written) == ("max_position_embeddings", 262144)
    assert [e.key for e in ENGINES.values() if e.context_change(short, target) is not None] == ["vllm==0.33.0"]


def test_a_local_verifier_is_explained_and_a_hub_id_is_not(tmp_path: Path) -> None:
    def head(name: object) -> dict[str, Any]:
        return {"speculators_config": {"verifier": {"name_or_path": name}}}

    assert local_verifier(head("meta-llama/Llama-3.1-8B-Instruct")) is None
    assert local_verifier({"architectures": ["LlamaForCausalLMEagle3"]}) is None
    for name in (str(tmp_path), "./target", "not a repo id", None):
        said = local_verifier(head(name))
        assert said is not None and "--speculative-config" in said.message


def _short_yarn(tmp_path: Path) -> tuple[Path, Path]:
    draft = tmp_path / "draft"
    shutil.copytree(FIXTURES / "torchspec-mla", draft)
    config = json.loads((draft / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (draft / "config.json").write_text(json.dumps(config))
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"num_hidden_layers": 61, "max_position_embeddings": 262144}))
    return draft, target


def test_convert_warns_for_0_33_and_writes_the_targets_length_when_asked(tmp_path: Path) -> None:
    draft, target = _short_yarn(tmp_path)
    plan = inspect(draft, engines=["vllm", "vllm==0.33.0"], target_config=target).plan
    assert codes(plan.notes).count("shorter-context") == 1  # 0.33's, not 0.32's
    dst = tmp_path / "matched"
    result = convert(draft, dst, engines=["vllm==0.33.0"], target_config=target, match_target_context=True)
    assert "shorter-context" not in codes(result.plan.notes)
    assert json.loads((dst / "config.json").read_text())["max_position_embeddings"] == 262144
    report = read_report(dst)
    assert report is not None and report.target_layers.context == 262144
    assert [(c.key, c.source, c.written) for c in report.config_changes] == [("max_position_embeddings", 4096, 262144)]
    assert "config.json `max_position_embeddings`" in (dst / "README.md").read_text()
    assert verify(dst, source=draft).ok  # the recorded change is the one allowed difference
    config = json.loads((dst / "config.json").read_text())
    config["max_position_embeddings"] = 131072  # not what the report records
    (dst / "config.json").write_text(json.dumps(config))
    problems = verify(dst, source=draft).structure
    assert ("config-differs", "max_position_embeddings") in {(found.code, found.subject) for found in problems}


def test_explain_warns_for_the_release_that_lowers_the_context(tmp_path: Path) -> None:
    draft, target = _short_yarn(tmp_path)
    dst = tmp_path / "plain"
    convert(draft, dst, engines=["vllm", "vllm==0.33.0"], target_config=target)
    readings = {r.engine: r.notes for r in explain(dst, target_config=target).engines}
    assert "shorter-context" not in codes(readings["vllm"])
    assert "shorter-context" in codes(readings["vllm==0.33.0"])


def test_matching_the_context_without_the_targets_config_is_a_usage_error(tmp_path: Path) -> None:
    draft, _ = _short_yarn(tmp_path)
    result = run_cli("convert", draft, tmp_path / "out", "--match-context")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "--match-context needs the target's context length" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_draft_reading_the_targets_lm_head_is_told_how_0_33_quantizes_its_copy() -> None:
    shared = inspect(FIXTURES / "modelopt-llama", engines=["vllm", "vllm==0.33.0"]).plan.notes
    assert sum("draft_lm_head_quantization" in note.message for note in shared) == 1  # 0.33's, not 0.32's
    own = inspect(FIXTURES / "specforge-llama", engines=["vllm==0.33.0"]).plan.notes
    assert not any(
        "draft_lm_head_quantization" in note.message for note in own
    )  # 0.33 refuses it for a draft's own lm_head


def test_a_release_without_a_formats_dialect_names_the_module_that_declares_its_dialects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.33.0 reads 0.32.0's dialects: the hint names vllm.py, not a file named after the release's choice."""
    from eaglequant.formats import get_format

    monkeypatch.setattr(get_format("quark"), "exclude_dialect", "unknown-dialect")
    with pytest.raises(InputError, match="no model of how vLLM reads AMD Quark exclusions") as caught:
        get_engine("vllm==0.33.0").dialect(get_format("quark"))
    assert caught.value.hint == "add the 'unknown-dialect' dialect to the dialects() of eaglequant.engines.vllm"
