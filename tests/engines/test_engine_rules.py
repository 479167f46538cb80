"""Each engine's exclusion matching on the draft's runtime names: the known traps, and for every fixture
layout, engine and format, that the written config makes the engine quantize exactly what was intended."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant import inspect
from eaglequant.cli.command import cli_wording
from eaglequant.common.errors import ExclusionProofError, InputError, worded
from eaglequant.common.findings import codes
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.engines import ENGINES
from eaglequant.engines.exclusions import prove
from eaglequant.engines.support import MATRIX, support
from eaglequant.engines.view import EngineView
from eaglequant.engines.vllm import VllmEngine
from eaglequant.formats import FORMATS
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention
from eaglequant.schemes.model import builtin_scheme_for
from tests.conftest import FIXTURE_NAMES, FIXTURES, NOTHING_TO_QUANTIZE, TARGET_LAYERS, engine_builds
from tests.plans import plan_for

NEEDS_QUANTIZED = "unquantized under this scheme"

ENGINE = VllmEngine()


def views(plan: ConversionPlan, fmt: str) -> list[EngineView]:
    """The vLLM view of ``plan``'s head, for a target of unknown layer count."""
    return [EngineView.of(ENGINE, plan.head, FORMATS[fmt], plan.scheme.kinds, None)]


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "multi-layer",
            {
                "model.fc",
                "lm_head",
                "model.layers.61.self_attn.qkv_proj",
                "model.layers.62.self_attn.qkv_proj",
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
    # 0.33 spells the fused QKV self_attn.qkv_proj, earlier releases qkv_proj: both are modelled.
    assert "model.layers.61.qkv_proj" in names or fixture == "torchspec-mla"


def test_proof_rejects_quarks_own_exclude_list() -> None:
    plan = inspect(FIXTURES / "specforge-llama").plan
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError, match=r"model\.fc: it should be kept unquantized"):
        prove(views(plan, "quark"), ["fc", "lm_head"], quantized)


def test_proof_rejects_a_pattern_that_catches_too_much() -> None:
    plan = inspect(FIXTURES / "specforge-llama").plan
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError, match=r"should be quantized but is excluded by 're:\.\*proj'"):
        prove(views(plan, "quark"), ["re:^model\\.fc$", "re:.*proj"], quantized)


def test_fused_spellings_must_agree() -> None:
    """A pattern that matches only one spelling of the fused QKV name is refused by the proof."""
    plan = inspect(FIXTURES / "specforge-llama", exclude=["midlayer.self_attn.[qkv]_proj"]).plan
    assert any("qkv_proj" in p and "self_attn" in p for p in plan.exclude_patterns)
    assert any("qkv_proj" in p and "self_attn" not in p for p in plan.exclude_patterns)
    quantized = {lin.module for lin in plan.quantized}
    with pytest.raises(ExclusionProofError):
        prove(views(plan, "quark"), [r"re:^model\.fc$", r"re:^model\.layers\.\d+\.qkv_proj$"], quantized)


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
            decisions = {engine.matching_rule(FORMATS[fmt], n, rules) is None for n in module.names}
            assert len(decisions) == 1, f"spellings of {module.names} disagree"
            if (
                engine.decide(module, FORMATS[fmt], result.plan.scheme.kinds).unquantized_by_engine is None
                and decisions.pop()
            ):
                quantized.update(module.members)
        assert quantized == {lin.module for lin in head.decoder_linears}


# (engine, format, pattern, runtime name, excluded?) — what each engine's own rule does with a pattern.
TRAPS = [
    # vLLM, Quark / compressed-tensors: exact or re: + re.match, no fused-name expansion.
    ("vllm", "quark", "fc", "model.fc", False),  # what Quark's own export writes: matches nothing
    ("vllm", "quark", "re:fc", "model.fc", False),  # re.match is anchored at the start
    ("vllm", "quark", "midlayer.*", "model.layers.61.self_attn.qkv_proj", False),  # checkpoint names never reach it
    ("vllm", "quark", "model.layers.61.q_proj", "model.layers.61.self_attn.qkv_proj", False),  # no packed mapping
    ("vllm", "quark", "re:.*q_proj", "model.layers.61.self_attn.qkv_proj", False),
    ("vllm", "quark", "re:.*fc.*", "model.fc", True),  # AMD's hand edit on amd/Kimi-K2.5-Eagle3-FP8
    ("vllm", "quark", r"re:^model\.fc$", "model.fc", True),
    ("vllm", "compressed-tensors", "re:.*fc$", "model.fc", True),  # llm-compressor's own ignore entry
    ("vllm", "compressed-tensors", "lm_head", "lm_head", True),
    ("vllm", "compressed-tensors", "re:.*qkv_proj$", "model.layers.61.self_attn.qkv_proj", True),
    # vLLM, ModelOpt: exact, then substring, then fnmatch; no re:.
    ("vllm", "modelopt", "fc", "model.fc", True),  # a substring of model.fc
    ("vllm", "modelopt", "proj", "model.layers.61.self_attn.o_proj", True),  # substring: catches every projection
    ("vllm", "modelopt", "kv_a_proj", "model.layers.61.self_attn.fused_qkv_a_proj", True),  # substring of fused_qkv_a
    ("vllm", "modelopt", "kv_a_proj_with_mqa", "model.layers.61.self_attn.fused_qkv_a_proj", False),
    ("vllm", "modelopt", "model.layers.6", "model.layers.61.mlp.down_proj", True),  # layer 6 catches layer 61
    ("vllm", "modelopt", "model.layers.61*", "model.layers.61.mlp.down_proj", True),  # name* -> name, name.*
    ("vllm", "modelopt", "re:.*fc", "model.fc", False),  # no re: in ModelOpt matching
    ("vllm", "modelopt", "q_proj", "model.layers.61.self_attn.qkv_proj", False),
    # TensorRT-LLM 1.2.x: fnmatchcase on the name and fused members' names; no ancestors, no re:.
    ("trtllm", "modelopt", "fc", "model.fc", False),  # full-string glob
    ("trtllm", "modelopt", "*fc", "model.fc", True),
    ("trtllm", "modelopt", "midlayer.*", "model.midlayer.self_attn.qkv_proj", False),  # names start with model.
    ("trtllm", "modelopt", "model.midlayer.*", "model.midlayer.self_attn.qkv_proj", True),
    ("trtllm", "modelopt", "*.q_proj", "model.midlayer.self_attn.qkv_proj", True),  # one member excludes the fused
    ("trtllm", "modelopt", "model.midlayer.self_attn", "model.midlayer.self_attn.o_proj", False),  # no ancestors
    ("trtllm", "modelopt", "re:.*fc", "model.fc", False),  # re: is a literal glob in 1.2.x
    # TensorRT-LLM main: also ancestors, and re: + fullmatch.
    ("trtllm-main", "modelopt", "*.q_proj", "model.midlayer.self_attn.qkv_proj", True),
    ("trtllm-main", "modelopt", "model.midlayer.self_attn", "model.midlayer.self_attn.o_proj", True),  # an ancestor
    ("trtllm-main", "compressed-tensors", "re:.*fc", "model.fc", True),
    ("trtllm-main", "compressed-tensors", "re:fc", "model.fc", False),
    # SGLang, Quark / compressed-tensors: exact or re: + re.match on its own names.
    ("sglang", "quark", "fc", "model.fc", False),
    ("sglang", "quark", "model.layers.61.self_attn.qkv_proj", "model.qkv_proj", False),  # vLLM's name misses it
    ("sglang", "quark", "re:.*qkv_proj$", "model.qkv_proj", True),
    ("sglang", "compressed-tensors", r"re:^model\.down_proj$", "model.down_proj", True),
    # SGLang, ModelOpt: glob full-matched on the name or any one part, plus the fused-MLA tail rule.
    ("sglang", "modelopt", "qkv_proj", "model.qkv_proj", True),
    ("sglang", "modelopt", "self_attn", "model.self_attn.o_proj", True),  # one part catches all attention
    ("sglang", "modelopt", "kv_a_proj_with_mqa", "model.self_attn.fused_qkv_a_proj_with_mqa", True),
    ("sglang", "modelopt", "model.layers.61.mlp.down_proj", "model.down_proj", False),
    # vLLM, native fp8 (Fp8Config, match mode "exact"): only the exact runtime name; seen by loading with vLLM 0.32.0.
    ("vllm", "fp8", "model.fc", "model.fc", True),
    ("vllm", "fp8", "fc", "model.fc", False),  # no substring
    ("vllm", "fp8", "re:.*fc$", "model.fc", False),  # no re:
    ("vllm", "fp8", "model.layers.61.self_attn.qkv_proj", "model.layers.61.self_attn.qkv_proj", True),
    ("vllm", "fp8", "model.layers.61.self_attn.q_proj", "model.layers.61.self_attn.qkv_proj", False),  # no shards
    ("vllm", "fp8", "model.layers.0.self_attn.qkv_proj", "model.layers.61.self_attn.qkv_proj", False),
    # SGLang, native fp8: dotted-path match (equal, ancestor, run of parts), with and without "model.";
    # qkv_proj / gate_up_proj asked under their shards only. Seen by loading with SGLang 0.5.23.
    ("sglang", "fp8", "model.qkv_proj", "model.qkv_proj", False),  # the fused name is never asked
    ("sglang", "fp8", "q_proj", "model.qkv_proj", False),  # k_proj and v_proj not excluded: not all shards
    ("sglang", "fp8", "model.self_attn.kv_b_proj", "model.self_attn.kv_b_proj", True),
    ("sglang", "fp8", "kv_b_proj", "model.self_attn.kv_b_proj", True),  # one dotted part
    ("sglang", "fp8", "model.layers.61.self_attn.kv_b_proj", "model.self_attn.kv_b_proj", False),  # vLLM's name
    ("sglang", "fp8", "self_attn", "model.self_attn.o_proj", True),  # an ancestor
    ("sglang", "fp8", "midlayer.self_attn.q_proj", "model.qkv_proj", False),  # checkpoint names miss it
    # TensorRT-LLM main, native fp8: modules_to_not_convert through the same globs.
    ("trtllm-main", "fp8", "*fc", "model.fc", True),
    ("trtllm-main", "fp8", "model.midlayer.self_attn.qkv_proj", "model.midlayer.self_attn.qkv_proj", True),
]


SGLANG_SHARDS = [  # SGLang, native fp8: a merged module is excluded when every shard is
    (["model.q_proj", "model.k_proj", "model.v_proj"], "model.qkv_proj", True),
    (["q_proj", "k_proj", "v_proj"], "model.qkv_proj", True),
    (["model.gate_proj", "up_proj"], "model.gate_up_proj", True),
    (["model.gate_proj"], "model.gate_up_proj", False),
]


@pytest.mark.parametrize(("patterns", "name", "excluded"), SGLANG_SHARDS)
def test_sglang_excludes_a_native_fp8_merged_module_by_all_its_shards(
    patterns: list[str], name: str, excluded: bool
) -> None:
    assert (ENGINES["sglang"].matching_rule(FORMATS["fp8"], name, patterns) is not None) is excluded


@pytest.mark.parametrize(("engine", "fmt", "pattern", "name", "excluded"), TRAPS)
def test_engine_matching_rule(engine: str, fmt: str, pattern: str, name: str, excluded: bool) -> None:
    assert (ENGINES[engine].matching_rule(FORMATS[fmt], name, [pattern]) is not None) is excluded


@pytest.mark.parametrize("pattern", ["kv_b_proj", "*kv_b_proj", "*kv_b_proj*", "re:.*kv_b_proj"])
def test_trtllm_refuses_rules_that_match_the_bare_kv_b_proj(pattern: str) -> None:
    """TensorRT-LLM main's MLA loader asks about the leaf name; such a rule breaks a BF16 kv_b_proj."""
    head = inspect(FIXTURES / "torchspec-mla").head
    assert ENGINES["trtllm-main"].pattern_problems(head, FORMATS["modelopt"], [pattern])
    assert not ENGINES["trtllm-main"].pattern_problems(
        head, FORMATS["modelopt"], ["model.midlayer.self_attn.kv_b_proj"]
    )


def _loadable(engine: str, attention: str) -> list[tuple[tuple[str, str | None], str]]:
    """Every weight-only or dynamic (scheme kinds, format) the engine loads: no calibration needed."""
    return [
        (kinds, fmt)
        for (kinds, fmt) in MATRIX
        if kinds != ("nvfp4", "nvfp4")
        and (cell := support(kinds, fmt, ENGINES[engine], attention)) is not None
        and cell.loads
    ]


def _engine_quantizes(engine, head, rules, fmt, kinds, target_layers) -> set[str]:
    quantized: set[str] = set()
    for module in engine.runtime_modules(head, target_layers):
        decisions = {engine.matching_rule(FORMATS[fmt], name, rules) is None for name in module.names}
        assert len(decisions) == 1, f"{engine.name}: spellings of {module.names} disagree"
        if engine.decide(module, FORMATS[fmt], kinds).unquantized_by_engine is None and decisions.pop():
            quantized.update(module.members)
    return quantized


def _plan_for_any_layer_count(head, kinds, fmt_name, engine_name, exclude):  # type: ignore[no-untyped-def]
    """The plan, and the target layer counts its rules must hold for: any, or the one given where the engine
    matches by exact name (vLLM reading a native fp8 config); None for a head the scheme cannot store, or cannot
    store as the engine needs (TensorRT-LLM main takes an MLA kv_b_proj only block-FP8, which a small head's
    32-wide one cannot be)."""
    scheme = builtin_scheme_for(kinds)
    try:
        return plan_for(head, scheme, fmt_name, engines=[engine_name], exclude=exclude), (0, 3, 61, 94)
    except InputError as exc:
        if NOTHING_TO_QUANTIZE in str(exc) or NEEDS_QUANTIZED in str(exc):
            return None, ()
        if "--target-layers" not in (worded(exc.hint_words, cli_wording) or ""):
            raise
    plan = plan_for(head, scheme, fmt_name, engines=[engine_name], exclude=exclude, target_layers=TARGET_LAYERS)
    return plan, (TARGET_LAYERS,)


@pytest.mark.parametrize("engine_name", list(ENGINES))
@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_written_rules_make_each_engine_quantize_exactly_the_plan(fixture: str, engine_name: str) -> None:
    """Engine x layout x format: the config read back as the engine reads it quantizes exactly the plan."""
    head = inspect(FIXTURES / fixture).head
    cases = _loadable(engine_name, head.attention)
    if (engine_name, head.attention) == ("trtllm", Attention.MLA):
        assert not cases, "TensorRT-LLM 1.2.x has no MLA draft model"
        return
    if not engine_builds(engine_name, head):
        return  # the engine cannot build this head at all (SGLang: a speculators or original EAGLE config)
    assert cases, f"{engine_name} loads nothing for {fixture}"
    for kinds, fmt_name in cases:
        for exclude in ([], ["re:.*down_proj"]):
            plan, counts = _plan_for_any_layer_count(head, kinds, fmt_name, engine_name, exclude)
            if plan is None:
                continue  # block FP8 on a head without a 128-aligned linear: refused, nothing to read back
            fmt = FORMATS[fmt_name]
            files = plan.config_files()
            written = fmt.read_config(files.quantization_config, files.side_files)
            assert written.kinds == kinds and not written.problems
            intended = {lin.module for lin in plan.quantized}
            assert intended, "nothing quantized"
            for target_layers in counts:
                got = _engine_quantizes(ENGINES[engine_name], head, written.patterns, fmt_name, kinds, target_layers)
                assert got == intended, (fmt_name, kinds, target_layers, got ^ intended)


@pytest.mark.parametrize("fixture", ["specforge-llama", "multi-layer", "modelopt-llama"])
def test_one_config_serves_every_engine(fixture: str) -> None:
    """ModelOpt FP8 per-channel loads in vLLM and both TensorRT-LLM targets: one exclude list must hold for all."""
    engines = ["vllm", "trtllm", "trtllm-main"]
    plan = inspect(FIXTURES / fixture, format="modelopt", engines=engines).plan
    intended = {lin.module for lin in plan.quantized}
    for engine in engines:
        got = _engine_quantizes(ENGINES[engine], plan.head, plan.exclude_patterns, "modelopt", plan.scheme.kinds, 61)
        assert got == intended


@pytest.mark.parametrize(
    ("fixture", "engine", "kept", "why"),
    [
        ("specforge-llama", "sglang", "fc", "plain torch.nn.Linear"),
        ("specforge-llama", "trtllm", "fc", "fc without a quant config"),
        ("torchspec-mla", "trtllm-main", "layers.0.self_attn.kv_b_proj", "k_b_proj_trans"),
        ("torchspec-mla", "trtllm-main", "layers.0.self_attn.q_a_proj", "block-FP8"),
        ("torchspec-mla", "trtllm-main", "layers.0.self_attn.kv_a_proj_with_mqa", "block-FP8"),
        ("torchspec-mla", "vllm", "lm_head", "without a quant config"),
        ("torchspec-mla", "sglang", "layers.0.self_attn.kv_b_proj", "float weights only"),
    ],
)
def test_engine_requirements_keep_modules_unquantized(fixture: str, engine: str, kept: str, why: str) -> None:
    fmt = "modelopt" if engine.startswith("trtllm") else "quark"
    plan = inspect(FIXTURES / fixture, format=fmt, engines=[engine]).plan
    assert kept not in {lin.module for lin in plan.quantized}
    weight = plan.head.linear(kept).weight
    assert why in plan.kept[weight]
    with pytest.raises(InputError, match=why):
        inspect(FIXTURES / fixture, format=fmt, engines=[engine], quantize=[plan.head.linear(kept).checkpoint_module])


def test_quantize_lifts_a_default_exclusion() -> None:
    plan = inspect(FIXTURES / "specforge-llama", quantize=["fc"]).plan
    assert "fc" in {lin.module for lin in plan.quantized}
    assert not any("fc" in p for p in plan.exclude_patterns)
    plan = inspect(FIXTURES / "specforge-llama", format="modelopt", quantize=["lm_head"]).plan  # vLLM + ModelOpt
    assert "lm_head" in {lin.module for lin in plan.quantized}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"quantize": ["lm_head"]}, "ParallelLMHead"),  # vLLM + Quark never quantize lm_head
        ({"quantize": ["nothing_here"]}, "--quantize 'nothing_here' matches nothing"),
        ({"quantize": ["fc"], "exclude": ["fc"]}, "matched by --quantize 'fc' and --exclude 'fc'"),
        ({"exclude": ["midlayer.self_attn.q_proj"]}, "single scheme"),  # fused members stay together
    ],
)
def test_rule_conflicts_are_refused(options: dict[str, list[str]], message: str) -> None:
    """As the command line says them (the library names the keywords: quantize='fc')."""
    with pytest.raises(InputError) as raised:
        inspect(FIXTURES / "specforge-llama", **options)
    assert message in raised.value.one_line(cli_wording)


def test_sglang_cannot_tell_draft_layers_apart() -> None:
    with pytest.raises(InputError, match=r"SGLang names .* alike \(model\.gate_up_proj\)"):
        inspect(FIXTURES / "multi-layer", engines=["sglang"], exclude=["layers.1.mlp.*"], target_layers=61)
    inspect(FIXTURES / "multi-layer", engines=["sglang"], exclude=["re:layers\\.\\d\\.mlp\\..*"])


@pytest.mark.parametrize(
    ("scheme", "fmt", "kept"),
    [
        ("fp8-per-channel", "quark", {"kv_b_proj"}),
        ("fp8-per-channel", "compressed-tensors", {"kv_b_proj"}),
        ("nvfp4", "compressed-tensors", {"kv_b_proj", "q_a_proj", "kv_a_proj_with_mqa"}),
    ],
)
def test_sglang_mla_drafts_keep_what_its_loader_cannot_take(scheme: str, fmt: str, kept: set[str]) -> None:
    """SGLang 0.5.23's MLA draft: kv_b_proj float only; under NVFP4 the fused q_a + kv_a too (one global scale)."""
    plan = inspect(FIXTURES / "torchspec-mla", scheme=scheme, format=fmt, engines=["sglang"]).plan
    unquantized = {lin.module.rsplit(".", 1)[-1] for lin in plan.head.decoder_linears} - {
        lin.module.rsplit(".", 1)[-1] for lin in plan.quantized
    }
    assert unquantized == kept
    assert "SGLang" in plan.kept[plan.head.linear("layers.0.self_attn.kv_b_proj").weight]


BLOCK_FP8 = KindPair("fp8-block", "fp8-group")
CHANNEL_FP8 = KindPair("fp8-channel", "fp8-token")


@pytest.mark.parametrize(
    ("engine", "names", "members", "rows", "kinds", "refused"),
    [
        # vLLM's split_kv_b_proj dequantizes kv_b_proj by whole 128-row blocks.
        ("vllm", ("x.kv_b_proj",), ("layers.0.self_attn.kv_b_proj",), (200,), BLOCK_FP8, True),
        ("vllm", ("x.kv_b_proj",), ("layers.0.self_attn.kv_b_proj",), (256,), BLOCK_FP8, False),
        ("vllm", ("x.kv_b_proj",), ("layers.0.self_attn.kv_b_proj",), (200,), CHANNEL_FP8, False),
        # SGLang's block-FP8 merged modules need every member aligned, the last included.
        ("sglang", ("model.qkv_proj",), ("a.q_proj", "a.k_proj", "a.v_proj"), (256, 128, 64), BLOCK_FP8, True),
        ("sglang", ("model.qkv_proj",), ("a.q_proj", "a.k_proj", "a.v_proj"), (256, 128, 128), BLOCK_FP8, False),
        ("sglang", ("model.self_attn.kv_b_proj",), ("layers.0.self_attn.kv_b_proj",), (256,), BLOCK_FP8, True),
    ],
)
def test_block_fp8_load_refusals(engine, names, members, rows, kinds, refused) -> None:  # type: ignore[no-untyped-def]
    from eaglequant.engines.base import RuntimeModule

    module = RuntimeModule(
        names, members, out_features=rows, attention=Attention.MLA if "kv_b_proj" in names[0] else Attention.MHA
    )
    fmt = FORMATS["fp8" if kinds == BLOCK_FP8 else "modelopt"]
    assert (ENGINES[engine].decide(module, fmt, kinds).outcome == "refused") is refused


def test_trtllm_main_needs_a_block_fp8_kv_b_proj() -> None:
    """Its native fp8 config always excludes *kv_b_proj*, and the MLA loader then reads weight_scale_inv."""
    from eaglequant.engines.base import RuntimeModule

    module = RuntimeModule(
        ("model.midlayer.self_attn.kv_b_proj",), ("layers.0.self_attn.kv_b_proj",), (256,), Attention.MLA
    )
    engine = ENGINES["trtllm-main"]
    block = engine.decide(module, FORMATS["fp8"], BLOCK_FP8)
    assert block.quantized and block.required is not None
    channel = engine.decide(module, FORMATS["modelopt"], CHANNEL_FP8)
    assert channel.outcome == "unquantized" and channel.required is None


@pytest.mark.parametrize("engines", [["trtllm-main"], ["sglang", "trtllm-main"]])
def test_trtllm_main_refuses_an_mla_kv_b_proj_kept_bf16_under_block_fp8(engines: list[str]) -> None:
    """The fixture's kv_b_proj (32 in-features) cannot be block FP8, and SGLang needs it BF16 anyway."""
    head = inspect(FIXTURES / "torchspec-mla").head
    with pytest.raises(InputError, match=r"cannot load .*kv_b_proj unquantized"):
        plan_for(head, builtin_scheme_for(BLOCK_FP8), "fp8", engines=engines, target_layers=61)


def test_vllm_needs_the_target_layer_count_to_exclude_a_decoder_module_in_native_fp8() -> None:
    head = inspect(FIXTURES / "specforge-llama").head  # its qkv_proj stays BF16 (64-row k_proj)
    with pytest.raises(InputError, match="exact name") as caught:
        plan_for(head, builtin_scheme_for(BLOCK_FP8), "fp8", engines=["vllm"])
    assert "--target-layers" in (worded(caught.value.hint_words, cli_wording) or "")
    plan = plan_for(head, builtin_scheme_for(BLOCK_FP8), "fp8", engines=["vllm"], target_layers=61)
    assert "model.layers.61.self_attn.qkv_proj" in plan.exclude_patterns


def test_a_native_fp8_config_with_a_different_ignored_layers_is_a_problem() -> None:
    fmt = FORMATS["fp8"]
    config = fmt.write_config(QuantConfig.flat(BLOCK_FP8, ["model.fc"])).quantization_config
    assert fmt.read_config(config, {}).problems == []
    written = fmt.read_config({**config, "ignored_layers": ["lm_head"]}, {})
    assert written.patterns == ["lm_head"] and codes(written.problems) == ["exclusion-keys-disagree"]


def test_a_modelopt_config_with_exclude_modules_but_no_ignore_is_a_problem() -> None:
    """vLLM 0.32.0 reads only ignore and would quantize the modules exclude_modules lists."""
    inline = {"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "exclude_modules": ["lm_head"]}
    written = FORMATS["modelopt"].read_config(inline, {})
    assert [(p.code, p.subject) for p in written.problems] == [("exclude-modules-without-ignore", "config.json")]
    assert FORMATS["modelopt"].read_config({**inline, "ignore": ["lm_head"]}, {}).problems == []


def test_a_partly_quantized_source_is_refused_for_that_before_any_rule_is_written() -> None:
    """Its FP8 linear is the problem to name, not the layer count the rules for its kept qkv_proj would need."""
    from dataclasses import replace

    from eaglequant.common.errors import LayoutError

    head = inspect(FIXTURES / "specforge-llama").head
    fp8 = [
        replace(t, info=replace(t.info, dtype="F8_E4M3")) if t.name.endswith("gate_proj.weight") else t
        for t in head.tensors
    ]
    with pytest.raises(LayoutError, match="F8_E4M3, cannot be quantized"):
        plan_for(replace(head, tensors=fp8), builtin_scheme_for(BLOCK_FP8), "fp8", engines=["vllm"])


def test_every_engine_builds_fc_and_lm_head_under_the_names_per_module_configs_are_keyed_by() -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.layouts.names import RUNTIME_NAMES
    from tests.conftest import FIXTURES

    with Checkpoint.open(FIXTURES / "specforge-llama") as checkpoint:
        head = describe_head(checkpoint)
    for engine in ENGINES.values():
        outer = {m.members[0]: m.names for m in engine.runtime_modules(head, 1) if m.members[0] in RUNTIME_NAMES}
        assert outer == {module: (name,) for module, name in RUNTIME_NAMES.items()}, engine.name


def test_a_verifier_named_neither_on_disk_nor_as_a_repo_id_has_no_config(tmp_path: Path) -> None:
    """A speculators head's verifier path that is not there and is no Hub repo id: no config, and no error swallowed
    beyond huggingface_hub's own refusal of the name (HFValidationError)."""
    from eaglequant.engines.target import verifier_config

    config = {"speculators_config": {"verifier": {"name_or_path": str(tmp_path / "not" / "there")}}}
    assert verifier_config(config) is None
    on_disk = tmp_path / "verifier"
    on_disk.mkdir()
    (on_disk / "config.json").write_text("{}", encoding="utf-8")
    config["speculators_config"]["verifier"]["name_or_path"] = str(on_disk)
    assert verifier_config(config) == on_disk / "config.json"
