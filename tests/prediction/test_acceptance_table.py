"""Acceptance for every k from one chain: the table's row k is what a chain of k steps predicts, ``verify --json``
gives it for k = 1..8 with intervals, and on the bundled pair it grows with k (which a finite walk need not do)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.errors import InputError
from eaglequant.measurement.statistics import Acceptance
from eaglequant.prediction.predict import (
    CapturedSequence,
    PredictionSettings,
    open_draft,
    predict,
    predict_table,
    replay,
)
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"


def _sequences(count: int = 3, length: int = 24, width: int = 3 * 256) -> list[CapturedSequence]:
    """Seeded inputs of the bundled draft's width; the references are the ids shifted, so some drafts match."""
    generator = torch.Generator().manual_seed(11)
    sequences = []
    for _ in range(count):
        ids = torch.randint(0, 2048, (length,), generator=generator)
        aux = torch.randn(length, width, generator=generator) * 2
        sequences.append(CapturedSequence(aux, ids, torch.roll(ids, -1), 2, 16))
    return sequences


def test_row_k_of_one_long_chain_is_what_a_chain_of_k_steps_predicts() -> None:
    sequences = _sequences()
    with Checkpoint.open(PAIR / "draft") as source:
        draft = open_draft(source)
        table = predict_table(draft, sequences, 6)
        assert table.max_draft_tokens == 6 and table.positions == (24, 24, 24)
        for k in (1, 3, 6):
            assert table[k] == predict(draft, sequences, k)


def test_every_k_replays_its_own_walk_over_the_first_k_steps() -> None:
    matches = [[True, True, False, True, True, True], [True, False, False, True, False, False]]
    one, two = replay(matches[:1], 0, 1), replay(matches, 0, 2)
    assert (one.drafts, one.accepted) == (4, 3)  # drafts at 0, 2 (rejected), 3, 5
    assert (two.drafts, two.accepted, two.accepted_per_position) == (2, 4, (2, 2))  # at 0 and 3, both accepted


def test_a_finite_walk_can_accept_less_with_more_drafted() -> None:
    """Why the table is not non-decreasing in k in general: the walk with k drafted lands on other positions, and
    its last draft ends k - 1 positions before the sequence's end (here the one match, at the last position, is
    drafted with k = 1 only)."""
    matches = [[False] * 5 + [True], [False] * 6]
    one, two = Acceptance((replay(matches[:1], 0, 1),)), Acceptance((replay(matches, 0, 2),))
    assert two.length().value < one.length().value


def test_the_table_reaches_the_verdict_k_and_the_device_is_checked() -> None:
    with pytest.raises(InputError, match="max_draft_tokens"):
        PredictionSettings(DEFAULT_DRAFT_TOKENS - 1)
    with pytest.raises(InputError, match="device"):
        PredictionSettings(device="tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one-line refusal is for a machine without CUDA")
def test_cuda_asked_for_without_one_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_cli("verify", PAIR / "draft", "--inputs", tmp_path / "none.safetensors", "--device", "cuda")
    assert result.exit_code == 2 and "CUDA" in result.stderr and len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize("pair", ["trained-pair", "trained-pair-mla"])
def test_weights_held_whole_predict_what_streamed_weights_predict(pair: str) -> None:
    """The code path ``--device cuda`` takes (whole weights, products and positions on the device), on the CPU."""
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.detect import describe_head
    from eaglequant.prediction.chain import ChainedDraft
    from eaglequant.prediction.predict import DraftModel

    with Checkpoint.open(FIXTURES / pair / "draft") as source:
        head = describe_head(source)
        sequences = _sequences(width=head.dims.num_aux_hidden_states * head.dims.target_hidden_size)
        streamed = open_draft(source)
        held = DraftModel(ChainedDraft(head, CanonicalWeights(source, head), held=True), streamed.d2t)
        for seq in sequences:
            for a, b in zip(
                held.forward.chain_logits(seq.aux, seq.ids, 4),
                streamed.forward.chain_logits(seq.aux, seq.ids, 4),
                strict=True,
            ):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert predict_table(held, sequences, 4) == predict_table(streamed, sequences, 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_chain_on_cuda_predicts_what_it_predicts_on_the_cpu() -> None:
    sequences = _sequences()
    with Checkpoint.open(PAIR / "draft") as source:
        on_cpu = predict_table(open_draft(source), sequences, 4)
        on_gpu = predict_table(open_draft(source, "cuda"), sequences, 4)
    for k in range(1, 5):
        assert on_gpu[k].length().value == pytest.approx(on_cpu[k].length().value, abs=0.05)


@pytest.mark.parametrize("pair", ["trained-pair", pytest.param("trained-pair-mla", marks=pytest.mark.slow)])
def test_verify_json_gives_acceptance_for_every_k_growing_with_k_on_the_bundled_pairs(
    pair: str, pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    inputs, draft, dst = pair_captured(pair), FIXTURES / pair / "draft", tmp_path / "fp8"
    eaglequant.convert(draft, dst, scheme="fp8-per-channel", format="quark")
    result = run_cli("verify", dst, "--source", draft, "--inputs", inputs, "--json")
    # the verdict (3: a gate failed, 7: inconclusive on these prompts) is not this test's subject
    assert result.exit_code in (0, 3, 7), result.stderr
    acceptance = json.loads(result.stdout)["acceptance"]
    rows = acceptance["by_draft_tokens"]
    assert [row["draft_tokens"] for row in rows] == list(range(1, DEFAULT_MAX_DRAFT_TOKENS + 1))
    for row in rows:
        for figure in ("source", "quantized", "difference"):
            assert row[figure]["low"] <= row[figure]["value"] <= row[figure]["high"], (row, figure)
    for which in ("source", "quantized"):
        lengths = [row[which]["value"] for row in rows]
        assert lengths == sorted(lengths), (which, lengths)  # on these pairs' 24 prompts; not guaranteed in general
    verdict_row = rows[DEFAULT_DRAFT_TOKENS - 1]
    assert verdict_row["difference"] == acceptance["difference"]  # the verdict is the table's row at k = 3
    assert verdict_row["source"] == acceptance["source"]["acceptance_length"]
    assert acceptance["sequences"] == 24
