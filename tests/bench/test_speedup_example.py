"""The worked example's arithmetic (docs/speedup.md): full-size Kimi-K2.5 MLA heads against a Kimi-K2.5-shaped MoE
target at TP 8, priced from headers and config alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.bench.heads import kimi_mla
from eaglequant.bench.speedup import kimi_tables, vllm_round, with_vocabulary
from eaglequant.speedup.model import stated_timing
from eaglequant.speedup.target_step import target_weights

KIMI = Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "kimi-k2.5"


@pytest.fixture(scope="module")
def tables() -> list:
    return kimi_tables(KIMI, {"scheme": "fp8-block", "format": "compressed-tensors", "vocab": 40960})


def test_each_figure_is_acceptance_times_a_step_over_verify_and_draft(tables: list) -> None:
    target = target_weights(KIMI, 8)
    timing = stated_timing(target)
    assert timing.routing_locality == 0.5  # the stated default
    step = target.forward_bytes(1, timing.context) / timing.bandwidth + timing.target_overhead_s
    for table in tables:
        assert [p.draft_tokens for p in table.points] == list(range(1, 9))
        for point in table.points:
            verify = target.forward_bytes(point.draft_tokens + 1, timing.context, 1, 0.5) / timing.bandwidth
            assert point.step_s == pytest.approx(step, rel=1e-12)
            assert point.verify_s == pytest.approx(
                verify + timing.target_overhead_s + timing.round_overhead_s, rel=1e-12
            )
            assert point.speedup == pytest.approx(
                point.acceptance_length * step / (point.verify_s + point.draft_s), rel=1e-12
            )


def test_verifying_four_tokens_reads_19_7_experts_and_costs_1_26_steps(tables: list) -> None:
    three = tables[0].at(3)
    assert three is not None
    assert three.verify_s / three.step_s == pytest.approx(1.26, abs=0.005)  # the round overhead included
    target = target_weights(KIMI, 8)
    assert target.distinct_experts(4) == pytest.approx(31.0, abs=0.05)  # independent routing: the bound
    assert target.distinct_experts(4, 1, 0.5) == pytest.approx(19.7, abs=0.05)  # 2.5 independent tokens' worth
    assert "at C = 1, a k = 8 verification reads 38.4 of 384 experts a MoE layer (a step 8.0 of 384)" in (
        tables[0].assumptions
    )


def test_a_cheaper_draft_is_faster_at_every_k_and_the_best_k_is_4(tables: list) -> None:
    bf16, fp8, pick = tables
    for a, b, c in zip(bf16.points, fp8.points, pick.points, strict=True):
        assert a.draft_s > b.draft_s > c.draft_s
        assert a.speedup < b.speedup < c.speedup
    assert [t.best_draft_tokens for t in tables] == [4, 4, 4]
    assert bf16.at(3).speedup == pytest.approx(1.7333, abs=0.001)  # type: ignore[union-attr]


def test_a_pruned_vocabulary_cuts_the_lm_head_rows_a_round_reads() -> None:
    full, pruned = vllm_round(kimi_mla()), vllm_round(with_vocabulary(kimi_mla(), 32768))
    lm_full, lm_pruned = full.part("lm_head"), pruned.part("lm_head")
    assert lm_full is not None and lm_pruned is not None
    assert lm_full.bytes_per_read == 163840 * 7168 * 2
    assert lm_pruned.bytes_per_read == 32768 * 7168 * 2
