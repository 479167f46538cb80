"""readback.py on its own: how each engine reads a written checkpoint, module by module, from its config and
headers; and the problems it finds when the config and the tensors disagree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError
from eaglequant.common.findings import codes
from eaglequant.engines.target import UNKNOWN, TargetModel
from eaglequant.readback.explanation import Explanation, explain_checkpoint, read_written_config
from eaglequant.readback.written_head import describe_written_head
from tests.conftest import FIXTURES

SRC = FIXTURES / "specforge-llama"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specforge-llama as fp8-per-channel in Quark for vLLM (fc and lm_head kept)."""
    return eaglequant.convert(SRC, tmp_path_factory.mktemp("readback") / "fp8").destination


def explain(path: Path, engines: list[str] | None = None, target: TargetModel = UNKNOWN) -> Explanation:
    with Checkpoint.open(path) as checkpoint:
        return explain_checkpoint(checkpoint, describe_written_head(checkpoint), engines, target)


def damaged(written: Path, tmp_path: Path, change_config: object) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(written, copy)
    config = json.loads((copy / "config.json").read_text())
    change_config(config["quantization_config"])  # type: ignore[operator]
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_the_config_read_back_is_what_was_written(written: Path) -> None:
    with Checkpoint.open(written) as checkpoint:
        fmt, config = read_written_config(checkpoint)
    assert fmt.name == "quark" and config.kinds == ("fp8-channel", "fp8-token") and not config.problems
    assert config.patterns == json.loads((written / "config.json").read_text())["quantization_config"]["exclude"]


def test_a_source_checkpoint_is_not_read_as_a_written_one() -> None:
    with Checkpoint.open(SRC) as checkpoint, pytest.raises(InputError, match="no quantization_config"):
        read_written_config(checkpoint)


def test_vllm_reads_every_module_as_the_conversion_meant(written: Path) -> None:
    explanation = explain(written, ["vllm"])
    assert explanation.ok and explanation.format == "quark" and [e.engine for e in explanation.engines] == ["vllm"]
    (vllm,) = explanation.engines
    assert vllm.loads and vllm.modules
    by_member = {member: module for module in vllm.modules for member in module.members}
    for name in ("midlayer.self_attn.q_proj", "midlayer.mlp.down_proj"):
        assert by_member[name].scheme is not None and by_member[name].rule is None
        assert {t.name.rsplit(".", 1)[-1] for t in by_member[name].expects} == {"weight", "weight_scale"}
    assert by_member["fc"].scheme is None and by_member["fc"].rule == r"re:^model\.fc$"  # its written rule
    assert all(t.found == "ok" for module in vllm.modules for t in module.expects)
    assert explanation.to_json()["ok"] is True


def test_an_engine_asked_for_that_cannot_load_it_is_a_problem_and_one_not_asked_for_is_a_note(written: Path) -> None:
    asked = explain(written, ["trtllm"])
    assert not asked.ok and codes(asked.all_problems) == ["cannot-load"]
    every = {e.engine: e for e in explain(written).engines}
    assert not every["trtllm"].loads and not every["trtllm"].problems and every["vllm"].loads


def test_a_module_no_rule_excludes_is_read_as_quantized_and_fails(written: Path, tmp_path: Path) -> None:
    copy = damaged(written, tmp_path, lambda config: config.update(exclude=[]))
    explanation = explain(copy, ["vllm"])
    assert [(p.code, p.subject) for p in explanation.all_problems] == [("weight-not-quantized", "model.fc")]
    (fc,) = (module for module in explanation.engines[0].modules if module.members == ("fc",))
    found = {t.name: t.found for t in fc.expects}
    assert fc.rule is None and fc.scheme is not None
    assert found["fc.weight"] == "BF16 [128, 384]" and found["fc.weight_scale"] == "missing"


def test_a_module_excluded_by_mistake_is_read_as_unquantized_and_fails(written: Path, tmp_path: Path) -> None:
    copy = damaged(written, tmp_path, lambda config: config["exclude"].append("re:.*o_proj"))
    explanation = explain(copy, ["vllm"])
    assert [(p.code, p.subject) for p in explanation.all_problems] == [
        ("stored-quantized", "model.layers.{L}.self_attn.o_proj")
    ]


def test_a_known_target_layer_count_names_runtime_modules_by_it(written: Path) -> None:
    unknown = explain(written, ["vllm"]).engines[0].modules
    known = explain(written, ["vllm"], TargetModel(61, "test")).engines[0].modules
    assert "model.layers.{L}.self_attn.qkv_proj" in [m.runtime_name for m in unknown]
    assert "model.layers.61.self_attn.qkv_proj" in [m.runtime_name for m in known]
    assert not any("{L}" in m.runtime_name for m in known)
