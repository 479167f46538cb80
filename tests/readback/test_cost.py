"""The cost of a speculative round: the weight bytes each engine reads, from the shapes' arithmetic, the same
whether computed from a plan (inspect, convert) or read back from the written checkpoint (explain)."""

from __future__ import annotations

from pathlib import Path

import pytest

import eaglequant
from eaglequant.bench.heads import kimi_mla, llama_head, write_head_headers
from eaglequant.common.errors import InputError
from eaglequant.common.sizes import decimal_bytes
from eaglequant.engines import ENGINES
from eaglequant.readback.cost import RoundCost, source_bytes_per_round
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PAIR_DRAFT = FIXTURES / "trained-pair" / "draft"
LAYOUT_FIXTURES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file() and "pair" not in p.name)


@pytest.fixture(scope="module")
def kimi_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("kimi-llama")
    write_head_headers(llama_head(), directory)  # 6.4 GB of holes: headers only
    return directory


def _vllm(report: eaglequant.conversion.inspection.InspectReport) -> RoundCost:
    (cost,) = report.round_costs
    assert cost.engine == "vllm"
    return cost


def test_the_full_size_kimi_llama_head_costs_what_its_shapes_say(kimi_llama: Path) -> None:
    hidden, vocab, intermediate, attention, k = 7168, 163840, 12288, 64 * 128, 3
    fc = hidden * 3 * hidden
    decoder = 3 * attention * 2 * hidden + hidden * attention + 3 * intermediate * hidden
    assert (fc, decoder, vocab * hidden) == (154_140_672, 675_282_944, 1_174_405_120)  # 154 M, 675 M, 1,174 M
    norms = 4 * hidden  # hidden_norm, input_layernorm, post_attention_layernorm, norm
    bf16 = 2 * (fc + k * decoder + k * vocab * hidden + k * norms + (k + 1) * hidden)

    source = _vllm(eaglequant.inspect(kimi_llama, engines=["vllm"]))
    assert source.source_bytes_per_round == bf16 and decimal_bytes(bf16) == "11.41 GB"
    assert [(p.part, p.reads) for p in source.parts] == [
        ("fc", 1), ("decoder", 3), ("lm_head", 3), ("embedding", 4), ("norms", 3)
    ]  # fmt: skip

    fp8_decoder = decoder + 4 * (3 * attention + hidden + 2 * intermediate + hidden)  # one float32 scale a row
    assert source.bytes_per_round == bf16 - k * (2 * decoder - fp8_decoder)
    assert round(source.reduction, 2) == 1.22

    with_lm_head = _vllm(eaglequant.inspect(kimi_llama, engines=["vllm"], format="modelopt", quantize=["lm_head"]))
    lm_head = with_lm_head.part("lm_head")
    assert lm_head is not None and lm_head.quantized and lm_head.bytes_per_read == vocab * hidden + 4 * vocab
    assert round(with_lm_head.reduction, 2) == 1.95

    nvfp4 = _vllm(eaglequant.inspect(kimi_llama, engines=["vllm"], scheme="nvfp4", format="modelopt"))
    assert round(nvfp4.reduction, 2) == 1.34

    # lm_head in NVFP4 of its own beside the FP8 decoder (ModelOpt MIXED_PRECISION): codes, an E4M3 scale per 16
    # and a float32 global scale
    own = eaglequant.inspect(
        kimi_llama, engines=["vllm"], format="modelopt", scheme_for=["lm_head=nvfp4"], target_layers=61
    )
    mixed = _vllm(own)
    mixed_lm_head = mixed.part("lm_head")
    assert mixed_lm_head is not None and mixed_lm_head.bytes_per_read == vocab * hidden // 2 + vocab * hidden // 16 + 4
    assert mixed.bytes_per_round == bf16 - k * (2 * decoder - fp8_decoder) - k * (
        2 * vocab * hidden - lm_head_nvfp4(vocab, hidden)
    )
    assert round(mixed.reduction, 2) == 2.64 and decimal_bytes(mixed.bytes_per_round) == "4.32 GB"


def lm_head_nvfp4(vocab: int, hidden: int) -> int:
    return vocab * hidden // 2 + vocab * hidden // 16 + 4


def test_the_full_size_mla_head_keeps_its_lm_head_for_vllm(tmp_path: Path) -> None:
    write_head_headers(kimi_mla(), tmp_path)
    cost = _vllm(eaglequant.inspect(tmp_path, engines=["vllm"]))
    lm_head = cost.part("lm_head")
    assert lm_head is not None and not lm_head.quantized and lm_head.bytes_per_read == 163840 * 7168 * 2
    assert 1.0 < cost.reduction < 1.22  # MLA's decoder is a smaller share of the round
    with pytest.raises(InputError, match="MLA draft's lm_head without a quant config"):
        eaglequant.inspect(tmp_path, engines=["vllm"], format="modelopt", quantize=["lm_head"])


def test_where_lm_head_stays_unquantized_and_holds_the_bytes_the_user_is_told_prune_is_the_lever(
    tmp_path: Path,
) -> None:
    """Issue 55, item 7: the full-size Kimi MLA head in vLLM reads 83% of a round in its BF16 lm_head; inspect,
    explain and the card say so and name prune, and a plan whose lm_head runs quantized says nothing of it."""
    from eaglequant.readback.cost import lm_head_lever

    (tmp_path / "kimi").mkdir()
    write_head_headers(kimi_mla(), tmp_path / "kimi")
    lever = lm_head_lever(_vllm(eaglequant.inspect(tmp_path / "kimi", engines=["vllm"])))
    assert lever is not None and "is 83% of the bytes a round reads" in lever and "eaglequant prune" in lever
    shown = run_cli("inspect", tmp_path / "kimi", "--engine", "vllm")
    assert "note: lm_head runs unquantized in vLLM 0.32.0 and is 83%" in " ".join(shown.stdout.split())
    dst = tmp_path / "mla"
    eaglequant.convert(FIXTURES / "torchspec-mla", dst, target_layers=61, engines=["vllm"])
    card = " ".join((dst / "README.md").read_text().split())
    assert "- `lm_head` runs unquantized in vLLM 0.32.0 and is " in card and "(eaglequant prune)." in card
    explained = " ".join(run_cli("explain", dst, "--engine", "vllm").stdout.split())
    assert "a smaller draft vocabulary can (eaglequant prune)" in explained
    llama = eaglequant.inspect(FIXTURES / "specforge-llama", engines=["vllm"], format="modelopt", quantize=["lm_head"])
    assert lm_head_lever(_vllm(llama)) is None  # run quantized: quantizing is the lever there


@pytest.mark.parametrize("fixture", LAYOUT_FIXTURES)
def test_every_fixture_has_a_cost_that_explain_reads_back_the_same(fixture: str, tmp_path: Path) -> None:
    planned = eaglequant.inspect(FIXTURES / fixture, target_layers=61)
    for cost in planned.round_costs:
        assert cost.bytes_per_round < cost.source_bytes_per_round
        assert cost.resident_bytes < cost.source_resident_bytes
    result = eaglequant.convert(FIXTURES / fixture, tmp_path / "out", target_layers=61)
    read_back = eaglequant.explain(result.destination)
    assert [r.round_cost for r in read_back.engines] == list(planned.round_costs)
    assert planned.round_costs == result.report().round_costs  # the plan's and the report's, in one form


def test_the_source_reads_the_same_bytes_a_round_in_every_engine() -> None:
    source = FIXTURES / "specforge-llama"
    quark = eaglequant.inspect(source, engines=["vllm", "vllm==0.33.0", "sglang"], format="quark", draft_tokens=2)
    modelopt = eaglequant.inspect(source, engines=["trtllm", "trtllm-main"], format="modelopt", draft_tokens=2)
    costs = quark.round_costs + modelopt.round_costs
    assert sorted(cost.engine for cost in costs) == sorted(ENGINES)
    assert {cost.source_bytes_per_round for cost in costs} == {source_bytes_per_round(quark.head, 2)}
    assert source_bytes_per_round(quark.head, 2) < source_bytes_per_round(quark.head, 3)


def test_a_draft_without_lm_head_or_embedding_reads_the_targets() -> None:
    cost = _vllm(eaglequant.inspect(FIXTURES / "modelopt-llama", engines=["vllm"]))
    assert cost.shared_parts == ("lm_head", "embedding")
    lm_head = cost.part("lm_head")
    assert lm_head is not None and not lm_head.quantized and lm_head.bytes_per_read == lm_head.source_bytes_per_read


def test_k_scales_what_runs_every_step_but_fc() -> None:
    one, four = (
        _vllm(eaglequant.inspect(FIXTURES / "specforge-llama", engines=["vllm"], draft_tokens=k)) for k in (1, 4)
    )
    for name in ("decoder", "lm_head", "norms"):
        a, b = one.part(name), four.part(name)
        assert a is not None and b is not None and b.bytes_per_round == 4 * a.bytes_per_round
    assert one.part("fc") == four.part("fc")


@pytest.mark.parametrize("k", [0, -1, 65, 2.5, True])
def test_a_k_outside_1_to_64_is_refused(k: object) -> None:
    with pytest.raises(InputError, match="draft_tokens"):
        eaglequant.inspect(FIXTURES / "specforge-llama", draft_tokens=k)


def test_the_cli_shows_and_refuses_k() -> None:
    shown = run_cli("inspect", FIXTURES / "specforge-llama", "--draft-tokens", "2")
    assert shown.exit_code == 0 and "weight bytes read per speculative round (k = 2)" in shown.stdout
    for bad in ("0", "nan", "1e400"):
        refused = run_cli("inspect", FIXTURES / "specforge-llama", "--draft-tokens", bad)
        assert refused.exit_code == 2 and "--draft-tokens" in refused.stderr


def test_quantizing_lm_head_where_an_engine_keeps_it_bf16_names_the_format_that_works() -> None:
    refused = run_cli("inspect", FIXTURES / "specforge-llama", "--quantize", "lm_head")
    assert refused.exit_code == 2 and "ParallelLMHead no quantization method" in refused.stderr
    assert "use --format modelopt, which vLLM 0.32.0 can load" in refused.stderr
    mla = run_cli("inspect", FIXTURES / "torchspec-mla", "--quantize", "lm_head")
    assert mla.exit_code == 2 and "lm_head quantized loads in no engine release with this scheme" in mla.stderr


def test_a_round_priced_at_one_k_is_priced_at_another_as_round_cost_prices_it() -> None:
    from eaglequant import inspect

    (at_three,) = inspect(PAIR_DRAFT, scheme="fp8-per-channel", format="quark").round_costs
    (at_five,) = inspect(PAIR_DRAFT, scheme="fp8-per-channel", format="quark", draft_tokens=5).round_costs
    assert at_three.at(5) == at_five
    source = at_three.as_source()
    assert source.bytes_per_round == at_three.source_bytes_per_round
    assert not any(part.quantized for part in source.parts)
