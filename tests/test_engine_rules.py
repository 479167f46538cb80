"""vLLM's exclusion matching on the draft's runtime names, including the known traps."""

from __future__ import annotations

import pytest

from eaglequant import inspect
from eaglequant.engines.exclusions import prove
from eaglequant.engines.vllm import VllmEngine
from eaglequant.errors import ExclusionProofError
from tests.conftest import FIXTURES

ENGINE = VllmEngine()


@pytest.mark.parametrize(
    ("pattern", "name", "excluded"),
    [
        ("fc", "model.fc", False),  # Quark's own export: matches nothing at run time
        ("re:fc", "model.fc", False),  # re.match is anchored at the start
        ("midlayer.*", "model.layers.61.qkv_proj", False),  # checkpoint names never reach the engine
        ("q_proj", "model.layers.61.qkv_proj", False),  # the draft gets no packed-module mapping
        ("re:.*q_proj", "model.layers.61.qkv_proj", False),
        ("lm_head", "lm_head", True),
        ("model.fc", "model.fc", True),
        ("re:.*fc.*", "model.fc", True),  # AMD's hand edit on amd/Kimi-K2.5-Eagle3-FP8
        (r"re:^model\.fc$", "model.fc", True),
        (r"re:.*\.fc$", "model.fc", True),
        ("re:.*qkv_proj$", "model.layers.61.qkv_proj", True),
    ],
)
def test_vllm_matching_rule(pattern: str, name: str, excluded: bool) -> None:
    assert (ENGINE.matching_rule("quark", name, [pattern]) is not None) is excluded


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "multi-layer",
            {
                "model.fc",
                "lm_head",
                "model.layers.61.qkv_proj",
                "model.layers.62.qkv_proj",
                "model.layers.61.self_attn.o_proj",
                "model.layers.62.mlp.gate_up_proj",
            },
        ),
        (
            "torchspec-mla",
            {
                "model.layers.61.self_attn.fused_qkv_a_proj",
                "model.layers.61.self_attn.q_b_proj",
                "model.layers.61.self_attn.kv_b_proj",
                "model.layers.61.self_attn.o_proj",
            },
        ),
    ],
)
def test_runtime_names_follow_the_target_layer_count(fixture: str, expected: set[str]) -> None:
    head = inspect(FIXTURES / fixture).head
    names = {n for m in ENGINE.runtime_modules(head, 61) for n in m.names}
    assert expected <= names
    assert not any("midlayer" in n or ".q_proj" in n or ".q_a_proj" in n for n in names)


def test_proof_rejects_quarks_own_exclude_list() -> None:
    plan = inspect(FIXTURES / "specforge-llama").plan
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError, match=r"model\.fc: it should be kept unquantized"):
        prove(plan.head, ["fc", "lm_head"], quantized, [ENGINE], "quark", plan.scheme.kinds, None)


def test_proof_rejects_a_pattern_that_catches_too_much() -> None:
    plan = inspect(FIXTURES / "specforge-llama").plan
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError, match=r"should be quantized but is excluded by 're:\.\*proj'"):
        prove(plan.head, ["re:^model\\.fc$", "re:.*proj"], quantized, [ENGINE], "quark", plan.scheme.kinds, None)


def test_fused_spellings_must_agree() -> None:
    """A pattern that matches only one spelling of the fused QKV name is refused by the proof."""
    plan = inspect(FIXTURES / "specforge-llama", exclude=["midlayer.self_attn.[qkv]_proj"]).plan
    assert any("qkv_proj" in p and "self_attn" in p for p in plan.exclude_patterns)
    assert any("qkv_proj" in p and "self_attn" not in p for p in plan.exclude_patterns)
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError):
        prove(
            plan.head,
            [r"re:^model\.fc$", r"re:^model\.layers\.\d+\.qkv_proj$"],
            quantized,
            [ENGINE],
            "quark",
            plan.scheme.kinds,
            None,
        )


@pytest.mark.parametrize("fmt", ["quark", "modelopt", "compressed-tensors"])
@pytest.mark.parametrize("fixture", ["specforge-llama", "torchspec-mla", "multi-layer"])
def test_written_config_makes_vllm_quantize_exactly_the_decoder_linears(fmt: str, fixture: str, tmp_path) -> None:
    """Read back what was written and apply vLLM's rule for that format, as vLLM would."""
    import json

    from eaglequant import convert

    result = convert(FIXTURES / fixture, tmp_path / "out", format=fmt)
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    rules = config["exclude"] if fmt == "quark" else config["ignore"]
    engine = VllmEngine()
    head = result.plan.head
    for target_layers in (1, 61, 94):
        quantized = set()
        for module in engine.runtime_modules(head, target_layers):
            decisions = {engine.matching_rule(fmt, n, rules) is None for n in module.names}
            assert len(decisions) == 1, f"spellings of {module.names} disagree"
            if engine.unquantized_reason(module, result.plan.scheme.kinds, fmt) is None and decisions.pop():
                quantized.update(module.members)
        assert quantized == {lin.module for lin in head.decoder_linears}
