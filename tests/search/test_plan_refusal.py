"""search catches the plan's refusal (issue 64, item 1): what a targeted engine cannot load is what its decision
(:meth:`Engine.decide`) says, for convert's plan, search's candidates and explain alike, never the support cells
read again. Shown by making vLLM's decision refuse a scheme its cells say it loads: all three follow the decision."""

from __future__ import annotations

from pathlib import Path

import pytest

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.findings import Finding
from eaglequant.engines import ENGINES, Engine, RuntimeModule
from eaglequant.engines.decision import ModuleDecision, refused
from eaglequant.engines.refusal import EngineRefusal, Refused
from eaglequant.engines.support import support
from eaglequant.formats import FORMATS, Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import Attention, HeadDescription
from eaglequant.schemes.model import load_scheme
from eaglequant.search.candidates import priced_candidates
from tests.conftest import FIXTURES

DRAFT = FIXTURES / "trained-pair" / "draft"
SCHEME = load_scheme("fp8-per-channel")
CT = FORMATS["compressed-tensors"]
WHY = "refused by this test's vLLM"


@pytest.fixture(scope="module")
def head() -> HeadDescription:
    with Checkpoint.open(DRAFT) as checkpoint:
        return describe_head(checkpoint)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("refusal") / "fp8-ct"
    eaglequant.convert(DRAFT, dst, scheme=SCHEME.name, format=CT.name, engines=["vllm"])
    return dst


def _refusing(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """vLLM, its decision refusing every module stored in FP8 per-channel in compressed-tensors."""
    vllm = ENGINES["vllm"]
    cell = support(SCHEME.kinds, CT.name, vllm, Attention.MHA)
    assert cell is not None and cell.loads  # the matrix says it loads: only the decision refuses
    decide = vllm.decide

    def decided(module: RuntimeModule, fmt: Format, kinds: KindPair, mixed: bool = False) -> ModuleDecision:
        return refused(WHY) if (fmt, kinds) == (CT, SCHEME.kinds) else decide(module, fmt, kinds, mixed)

    monkeypatch.setattr(vllm, "decide", decided)
    return vllm


def test_the_plan_refuses_what_the_decision_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = _refusing(monkeypatch)
    with pytest.raises(EngineRefusal) as raised:
        eaglequant.inspect(DRAFT, scheme=SCHEME.name, format=CT.name, engines=["vllm"])
    refusal = raised.value.refusal
    assert (refusal.engine, refusal.refused, refusal.why) == (vllm, Refused.SCHEME, WHY)
    assert "vLLM cannot load fp8-per-channel" in raised.value.one_line()
    assert "format='compressed-tensors'" not in raised.value.one_line()  # the hint names a format that loads


def test_search_skips_the_candidates_the_plan_refuses(head: HeadDescription, monkeypatch: pytest.MonkeyPatch) -> None:
    """In compressed-tensors: lm_head kept (priced until vLLM refuses the scheme) and lm_head quantized (which
    vLLM's config there runs unquantized: the module refused, until the scheme is, first)."""
    schemes = {SCHEME.name: SCHEME}
    before, skipped_before = priced_candidates(head, schemes, ["vllm"], [None], 32)
    assert [c.label for c, _ in before if c.format == CT.name] == ["fp8-per-channel / compressed-tensors"]
    unquantized = ("lm-head-unquantized", "vllm", "vLLM 0.32.0 runs lm_head unquantized in that format")
    assert _counted(skipped_before) == {unquantized: 2}
    _refusing(monkeypatch)
    after, skipped = priced_candidates(head, schemes, ["vllm"], [None], 32)
    assert [c.label for c, _ in after] == [c.label for c, _ in before if c.format != CT.name]
    scheme = ("engine-does-not-load", "vllm", "vLLM 0.32.0 does not load the scheme in that format")
    assert _counted(skipped) == {scheme: 2, unquantized: 1}


def _counted(skipped: dict[Finding, int]) -> dict[tuple[str, str, str], int]:
    return {(why.code, why.subject, why.message): n for why, n in skipped.items()}


def test_explain_reads_the_decision(written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert eaglequant.explain(written, engines=["vllm"]).engines[0].loads
    _refusing(monkeypatch)
    reading = eaglequant.explain(written, engines=["vllm"]).engines[0]
    assert not reading.loads and [p.code for p in reading.problems] == ["cannot-load"]


def test_a_release_that_cannot_build_the_head_is_the_searchs_error() -> None:
    """Every candidate alike: not a candidate skipped, the plan's refusal of the head, surfaced."""
    with Checkpoint.open(FIXTURES / "modelopt-llama") as checkpoint:
        described = describe_head(checkpoint)
    with pytest.raises(EngineRefusal, match="SGLang cannot load this head") as raised:
        priced_candidates(described, {SCHEME.name: SCHEME}, ["trtllm", "sglang"], [None], None)
    assert raised.value.refusal.refused is Refused.HEAD


def test_a_linear_the_engine_needs_quantized_kept_skips_the_candidate() -> None:
    """TensorRT-LLM main dequantizes an MLA draft's kv_b_proj from its block-FP8 scales, and this head's cannot be
    stored in FP8 blocks: the plan refuses the candidate for that release (an error that stopped the whole search
    before the refusal was typed)."""
    with Checkpoint.open(FIXTURES / "torchspec-mla") as checkpoint:
        described = describe_head(checkpoint)
    block = load_scheme("fp8-block")
    with pytest.raises(EngineRefusal) as raised:
        eaglequant.inspect(FIXTURES / "torchspec-mla", scheme=block.name, format="fp8", engines=["trtllm-main"])
    assert raised.value.refusal.refused is Refused.KEPT
    priced, skipped = priced_candidates(described, {block.name: block}, ["trtllm-main"], [None], None)
    assert not any(candidate.format == "fp8" and not candidate.lm_head for candidate, _ in priced)
    said = "TensorRT-LLM main (2026) cannot load midlayer.self_attn.kv_b_proj unquantized, as the candidate keeps it"
    assert _counted(skipped)[("engine-needs-quantized", "trtllm-main", said)] == 1
