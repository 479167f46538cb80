"""A pruned draft vocabulary: the most frequent target tokens kept (ties to the lower id, special tokens first), the
lm_head rows and vocabulary maps written exactly, a reduced vocabulary pruned within itself, bad input refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError
from eaglequant.layouts.detect import describe_head
from eaglequant.vocabulary.counts import TokenCounts, read_counts
from eaglequant.vocabulary.pruned_head import PRUNE_RECORD, choose_vocabulary
from tests.conftest import FIXTURES, run_cli

SOURCE = FIXTURES / "specforge-llama"  # vocabulary 512, draft vocabulary 256 (its own d2t)


def _counts(values: list[int]) -> TokenCounts:
    return TokenCounts(torch.tensor(values, dtype=torch.int64), "test")


def _skewed_counts(path: Path, vocab: int = 512) -> Path:
    """Counts that rank every token differently: token t counted (t * 37) % vocab times."""
    path.write_text(json.dumps([(t * 37) % vocab for t in range(vocab)]))
    return path


def test_the_most_frequent_tokens_are_kept_ties_to_the_lower_id_specials_first() -> None:
    targets = torch.tensor([1, 3, 4, 6, 7])
    counts = _counts([0, 5, 0, 9, 5, 0, 5, 1])  # 3 most, then 1, 4, 6 tied
    assert choose_vocabulary(targets, counts, 3, []).target_ids.tolist() == [1, 3, 4]
    chosen = choose_vocabulary(targets, counts, 3, [7, 2])  # 2 is not in the draft's vocabulary: nothing to keep
    assert chosen.target_ids.tolist() == [1, 3, 7] and chosen.special == (7,)
    assert chosen.source_rows.tolist() == [0, 1, 4]
    assert chosen.coverage == pytest.approx(15 / 25) and chosen.source_coverage == pytest.approx(25 / 25)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_choice_is_the_top_of_the_ranking(data: st.DataObject) -> None:
    vocab = data.draw(st.integers(2, 40))
    targets = sorted(data.draw(st.sets(st.integers(0, vocab - 1), min_size=2)))
    counts = _counts(data.draw(st.lists(st.integers(0, 5), min_size=vocab, max_size=vocab)))
    size = data.draw(st.integers(1, len(targets) - 1))
    chosen = choose_vocabulary(torch.tensor(targets), counts, size, [])
    ranked = sorted(targets, key=lambda t: (-int(counts.counts[t]), t))[:size]
    assert chosen.target_ids.tolist() == sorted(ranked)
    assert [targets[row] for row in chosen.source_rows.tolist()] == chosen.target_ids.tolist()


@pytest.mark.parametrize("size", [0, 256, 1000])
def test_a_size_outside_the_drafts_vocabulary_is_refused(size: int) -> None:
    with pytest.raises(InputError, match="keep 1 to 255"):
        choose_vocabulary(torch.arange(256), _counts([1] * 512), size, [])


@pytest.fixture(scope="module")
def pruned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pruned")
    result = eaglequant.prune(SOURCE, tmp / "out", size=64, counts=_skewed_counts(tmp / "counts.json"))
    assert result.size == 64 and result.source_size == 256
    return result.destination


def test_the_pruned_head_keeps_the_rows_of_the_tokens_it_keeps(pruned: Path) -> None:
    with Checkpoint.open(SOURCE) as source, Checkpoint.open(pruned) as written:
        old_targets = torch.arange(256) + source.read("d2t")
        new_targets = torch.arange(64) + written.read("d2t")
        assert new_targets.tolist() == sorted(new_targets.tolist()) and set(new_targets.tolist()) <= set(
            old_targets.tolist()
        )
        rows = [old_targets.tolist().index(t) for t in new_targets.tolist()]
        assert torch.equal(
            written.read("lm_head.weight").view(torch.int16), source.read("lm_head.weight")[rows].view(torch.int16)
        )
        assert written.read("t2d").nonzero().flatten().tolist() == new_targets.tolist()
        for name in source.tensors.keys() - {"lm_head.weight", "d2t", "t2d"}:
            assert torch.equal(written.read(name).view(torch.uint8), source.read(name).view(torch.uint8)), name
        head = describe_head(written)
        assert head.dims.draft_vocab_size == 64 and head.dims.vocab_size == 512
    record = json.loads((pruned / PRUNE_RECORD).read_text())
    assert record["draft_vocab_size"] == 64 and record["special_tokens_kept"] == []


def test_the_pruned_head_converts_and_reads_fewer_bytes_a_round(pruned: Path, tmp_path: Path) -> None:
    (before,) = eaglequant.inspect(SOURCE).round_costs
    (after,) = eaglequant.inspect(pruned).round_costs
    lm_before, lm_after = before.part("lm_head"), after.part("lm_head")
    assert lm_before is not None and lm_after is not None
    assert lm_after.bytes_per_read * 4 == lm_before.bytes_per_read
    result = eaglequant.convert(pruned, tmp_path / "fp8", verify_output=True)
    assert result.verification is not None and result.verification.ok


def test_a_reduced_vocabulary_is_pruned_within_itself_and_pruning_is_deterministic(
    tmp_path: Path, pruned: Path
) -> None:
    again = eaglequant.prune(pruned, tmp_path / "again", size=16, counts=_skewed_counts(tmp_path / "c.json"))
    with Checkpoint.open(pruned) as first, Checkpoint.open(again.destination) as second:
        kept = set((torch.arange(64) + first.read("d2t")).tolist())
        assert set((torch.arange(16) + second.read("d2t")).tolist()) <= kept
    twice = eaglequant.prune(SOURCE, tmp_path / "twice", size=64, counts=_skewed_counts(tmp_path / "d.json"))
    assert (twice.destination / "model.safetensors").read_bytes() == (pruned / "model.safetensors").read_bytes()


def test_special_tokens_in_the_config_and_keep_are_always_kept(tmp_path: Path) -> None:
    config = json.loads((SOURCE / "config.json").read_text())
    with Checkpoint.open(SOURCE) as source:
        draft_tokens = (torch.arange(256) + source.read("d2t")).tolist()
    counts = [0] * 512
    for token in draft_tokens[:8]:
        counts[token] = 10
    path = tmp_path / "counts.json"
    path.write_text(json.dumps(counts))
    special = [draft_tokens[-1]]
    src = tmp_path / "src"
    src.mkdir()
    for file in SOURCE.iterdir():
        (src / file.name).write_bytes(file.read_bytes())
    (src / "config.json").write_text(json.dumps({**config, "eos_token_id": special}))
    result = eaglequant.prune(src, tmp_path / "out", size=4, counts=path, keep=[draft_tokens[-2]])
    assert result.special == (draft_tokens[-1], draft_tokens[-2])
    with Checkpoint.open(result.destination) as written:
        kept = (torch.arange(4) + written.read("d2t")).tolist()
    assert kept == sorted([*draft_tokens[:2], draft_tokens[-2], draft_tokens[-1]])


def test_counts_are_read_from_captured_inputs_or_files(tmp_path: Path) -> None:
    top = torch.tensor([[[3, 1], [3, 0], [5, 2], [7, 7]]])
    save_file({"target_top_ids": top, "lengths": torch.tensor([3])}, tmp_path / "captured.safetensors")
    counts = read_counts(tmp_path / "captured.safetensors", 8)
    assert counts.counts.tolist() == [0, 0, 0, 2, 0, 1, 0, 0]  # the 4th position is padding
    save_file({"counts": torch.tensor([4, 0, 2])}, tmp_path / "counts.safetensors")
    assert read_counts(tmp_path / "counts.safetensors", 4).counts.tolist() == [4, 0, 2, 0]
    (tmp_path / "counts.json").write_text(json.dumps({"2": 5, "0": 1}))
    assert read_counts(tmp_path / "counts.json", 3).counts.tolist() == [1, 0, 5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"counts": torch.ones(600, dtype=torch.int64)},
            "counts for 600 token ids, but the target's vocabulary has 512",
        ),
        ({"target_top_ids": torch.full((1, 4, 2), 900)}, "outside the target's vocabulary of 512"),
        ({"hidden_states": torch.zeros(1, 4, 2), "input_ids": torch.zeros(1, 4)}, "neither captured inputs"),
        ({"counts": torch.zeros(512, dtype=torch.int64)}, "every count is zero"),
        ({"counts": torch.ones(512)}, "not whole counts"),
    ],
)
def test_bad_counts_are_one_line_and_exit_2(tmp_path: Path, content: dict, message: str) -> None:
    path = tmp_path / "counts.safetensors"
    save_file(content, path)
    result = run_cli("prune", SOURCE, tmp_path / "out", "--size", "64", "--counts", path)
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_cli_prunes_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    counts = _skewed_counts(tmp_path / "counts.json")
    done = run_cli("prune", SOURCE, tmp_path / "out", "--size", "32", "--counts", counts)
    assert done.exit_code == 0 and "draft vocabulary 256 → 32 tokens" in done.stdout
    again = run_cli("prune", SOURCE, tmp_path / "out", "--size", "32", "--counts", counts)
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert run_cli("prune", SOURCE, tmp_path / "out", "--size", "32", "--counts", counts, "--overwrite").exit_code == 0
    too_big = run_cli("prune", SOURCE, tmp_path / "big", "--size", "256", "--counts", counts)
    assert too_big.exit_code == 2 and "--size 256" in too_big.stderr and "keep 1 to 255" in too_big.stderr
    no_lm_head = run_cli("prune", FIXTURES / "modelopt-llama", tmp_path / "x", "--size", "8", "--counts", counts)
    assert no_lm_head.exit_code == 2 and "no lm_head of its own" in no_lm_head.stderr


PAIR = FIXTURES / "trained-pair"


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("captured") / "captured.safetensors"
    eaglequant.capture(PAIR / "target", PAIR / "draft", path, max_prompts=3, max_tokens=32)
    return path


def test_the_prediction_replays_both_drafts_on_captured_inputs(captured: Path, tmp_path: Path) -> None:
    roomy = eaglequant.prune(PAIR / "draft", tmp_path / "roomy", size=1024, counts=captured, inputs=captured)
    assert roomy.coverage == roomy.source_coverage  # every token the target chose is still there
    assert roomy.prediction is not None and roomy.prediction.source.acceptance_length.value > 1.0
    tiny = eaglequant.prune(PAIR / "draft", tmp_path / "tiny", size=4, counts=captured, inputs=captured)
    assert tiny.prediction is not None and tiny.coverage < 0.5
    assert tiny.prediction.quantized.acceptance_length.value < tiny.prediction.source.acceptance_length.value
    assert tiny.prediction.source == roomy.prediction.source


def test_a_pruned_head_past_the_shard_size_is_sharded_with_its_index(
    pruned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eaglequant.vocabulary import pruned_head

    monkeypatch.setattr(pruned_head, "DEFAULT_MAX_SHARD_BYTES", 100_000)
    sharded = eaglequant.prune(SOURCE, tmp_path / "sharded", size=64, counts=_skewed_counts(tmp_path / "c.json"))
    index = json.loads((sharded.destination / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    with Checkpoint.open(pruned) as whole, Checkpoint.open(sharded.destination) as parts:
        assert whole.tensors.keys() == parts.tensors.keys()
        assert index["metadata"]["total_size"] == sum(info.nbytes for info in parts.tensors.values())
        for name in whole.tensors:
            assert torch.equal(whole.read(name).view(torch.uint8), parts.read(name).view(torch.uint8)), name


def test_the_cli_says_plainly_when_the_cut_loses_none_of_the_counts(tmp_path: Path) -> None:
    """Issue 48, item 14: no "96.40% → 96.40%" when the counts that chose the cut measure it, one arrow."""
    few = tmp_path / "few.json"
    few.write_text(json.dumps({"1": 5, "3": 9, "4": 2}))
    same = run_cli("prune", SOURCE, tmp_path / "same", "--size", "32", "--counts", few)
    assert same.exit_code == 0, same.stderr
    assert "as before the cut: those counts chose the kept tokens, so they measure no loss" in same.stdout
    assert "% →" not in same.stdout and "->" not in same.stdout
    cut = run_cli("prune", SOURCE, tmp_path / "cut", "--size", "32", "--counts", _skewed_counts(tmp_path / "c.json"))
    assert cut.exit_code == 0 and "% → " in cut.stdout and "(the counts that chose the kept tokens)" in cut.stdout
    assert "->" not in cut.stdout
