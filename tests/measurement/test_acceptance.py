"""Acceptance figures, the engine's walk, prompts, the served draft and the chained draft (no engine needed)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eaglequant.common.errors import InputError
from eaglequant.measurement.prompts import read_prompts
from eaglequant.measurement.statistics import Acceptance, PromptCounts, lossless, paired_difference, t_quantile
from eaglequant.prediction.predict import replay


def counts(drafts: int, per_position: tuple[int, ...], tokens: tuple[int, ...] = ()) -> PromptCounts:
    return PromptCounts(drafts, sum(per_position), per_position, tokens)


def test_acceptance_length_is_one_plus_accepted_per_draft() -> None:
    run = Acceptance((counts(10, (8, 6, 4)), counts(20, (10, 5, 0))))
    length = run.length()
    assert length.value == pytest.approx(1 + (18 + 15) / 30)
    assert length.low < length.value < length.high
    assert [p.value for p in run.per_position()] == pytest.approx([18 / 30, 11 / 30, 4 / 30])


def test_identical_prompts_have_no_spread_and_one_prompt_has_no_interval() -> None:
    same = Acceptance((counts(10, (5, 3, 1)),) * 4)
    assert same.length().half_width == pytest.approx(0.0)
    single = Acceptance((counts(10, (5, 3, 1)),))
    assert math.isinf(single.length().half_width)


def test_t_quantiles_match_the_tables() -> None:
    for df, table in ((5, 2.571), (8, 2.306), (10, 2.228), (23, 2.069), (30, 2.042), (1000, 1.962)):
        assert t_quantile(df) == pytest.approx(table, abs=0.002)


def test_paired_difference_is_zero_against_itself_and_signed() -> None:
    source = Acceptance((counts(10, (8, 6, 4)), counts(12, (6, 3, 1)), counts(9, (9, 8, 7))))
    assert paired_difference(source, source).value == 0.0
    assert paired_difference(source, source).half_width == pytest.approx(0.0)
    worse = Acceptance((counts(12, (6, 4, 2)), counts(14, (5, 2, 0)), counts(11, (7, 6, 5))))
    diff = paired_difference(worse, source)
    assert diff.value == pytest.approx(worse.length().value - source.length().value)
    assert diff.value < 0 and diff.low < diff.value < diff.high


def test_lossless_names_the_first_difference() -> None:
    alone = [counts(0, (), (1, 2, 3)), counts(0, (), (4, 5, 6))]
    assert lossless([counts(1, (0,), (1, 2, 3)), counts(1, (0,), (4, 5, 6))], alone).ok
    found = lossless([counts(1, (0,), (1, 2, 3)), counts(1, (0,), (4, 9, 6))], alone)
    assert not found.ok and found.equal == 1 and found.first_difference == (1, 1)


def test_a_departure_at_a_near_tie_is_arithmetic_not_a_defect() -> None:
    def run(tokens: tuple[int, ...], gaps: tuple[float, ...]) -> PromptCounts:
        return PromptCounts(1, 0, (0,), tokens, gaps)

    alone = [run((4, 5, 6), (2.0, 0.0625, 1.0))]
    tied = lossless([run((4, 9, 6), (2.0, 0.5, 1.0))], alone, tolerance=0.125)
    assert tied.ok and tied.near_ties == 1 and tied.first_difference is None
    assert not lossless([run((4, 9, 6), (2.0, 0.5, 1.0))], alone, tolerance=0.01).ok
    clear = [run((4, 5, 6), (2.0, 1.5, 1.0))]
    assert lossless([run((4, 9, 6), (2.0, 0.5, 1.0))], clear, tolerance=0.125).first_difference == (0, 1)


def test_replay_walks_like_the_engine() -> None:
    # chain at t accepts a(t) tokens; the engine emits a + 1 and drafts again from there
    matches = [
        [True, False, True, True, False, True, True, True, True, True],
        [True, False, False, True, False, True, True, True, True, True],
        [False, False, False, True, False, True, True, True, True, True],
    ]
    found = replay(matches, start=0, draft_tokens=3)
    # t=0: a=2 -> t=3: a=3 -> t=7: a=3 (t + 3 <= 10) -> t=11 stops
    assert (found.drafts, found.accepted, found.accepted_per_position) == (3, 8, (3, 3, 2))


@given(st.lists(st.lists(st.booleans(), min_size=12, max_size=12), min_size=3, max_size=3), st.integers(0, 5))
def test_replay_counts_are_consistent(matches: list[list[bool]], start: int) -> None:
    found = replay(matches, start, 3)
    assert found.accepted == sum(found.accepted_per_position)
    assert list(found.accepted_per_position) == sorted(found.accepted_per_position, reverse=True)
    assert found.accepted_per_position[0] <= found.drafts
    # each draft emits accepted + 1 tokens; the last draft starts at most `steps` positions before the end
    assert found.drafts + found.accepted <= max(0, 12 + 1 - start)


def test_prompts_from_jsonl_and_text(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(json.dumps({"prompt": "a b"}) + "\n\n" + json.dumps({"prompt": "c"}) + "\n")
    assert read_prompts(jsonl)[0] == ["a b", "c"]
    text = tmp_path / "p.txt"
    text.write_text("one\ntwo\nthree\n")
    assert read_prompts(text, limit=2)[0] == ["one", "two"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: no \"prompt\" string"):
        read_prompts(bad)
    with pytest.raises(InputError, match="no such file"):
        read_prompts(tmp_path / "missing.jsonl")


def test_bundled_prompts_are_the_trained_pairs_held_out_prompts() -> None:
    prompts, where = read_prompts(None)
    assert where == "bundled held-out prompts"
    assert len(prompts) >= 16 and all(p.strip() for p in prompts)


PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"


def _training_draft():
    """The draft as the training script builds it (its own code), loaded with the committed weights."""
    import importlib.util

    from safetensors.torch import load_file

    spec = importlib.util.spec_from_file_location("train_pair", PAIR.parent / "train_pair.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train  # its dataclasses look their module up
    spec.loader.exec_module(train)
    tensors = {k: v.to(torch.float32) for k, v in load_file(str(PAIR / "draft" / "model.safetensors")).items()}
    dims = train.Dims()
    draft = train.Draft(dims, 3, tensors["lm_head.weight"].shape[0], tensors["embed_tokens.weight"], torch.Generator())
    with torch.no_grad():
        for name, param in zip(draft.names, draft.params, strict=True):
            param.copy_(tensors[name])
    return draft, tensors["d2t"]


def test_chained_draft_matches_the_training_time_test_of_the_training_script() -> None:
    """Two independent implementations of the engine's chaining agree on every step's arg-max."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import open_draft

    draft, _ = _training_draft()
    generator = torch.Generator().manual_seed(0)
    length, steps = 40, 3
    aux = torch.randn(length, 3 * 256, generator=generator)
    ids = torch.randint(0, 4096, (length + steps,), generator=generator)
    with torch.no_grad():
        expected = [o[0].argmax(-1) for o in draft.chain(aux[None], torch.cat((ids[:1], ids))[None], steps)]
    with Checkpoint.open(PAIR / "draft") as checkpoint:
        chained = open_draft(checkpoint).forward.chain(aux, ids[:length], steps)
    for step in range(steps):
        valid = length - step  # positions whose step-s token exists in both
        agree = (chained[step][:valid] == expected[step][:valid]).float().mean().item()
        assert agree == 1.0, f"step {step + 1}: {agree:.3f}"


def test_a_lossy_draft_over_its_budget_has_both_problems_about_its_label() -> None:
    from eaglequant.common.findings import codes
    from eaglequant.measurement.measure import GREEDY, AcceptanceReport, DraftResult, EngineRun, Settings
    from eaglequant.measurement.statistics import Interval, Lossless

    run = EngineRun("0.32.0", {"method": "eagle3"}, 1.0, {GREEDY.name: (counts(4, (3, 2)),)})
    source = DraftResult("source", Path("src"), "source", run, Lossless(3, 0, 3, None))
    lossy = DraftResult("fp8", Path("fp8"), "stored", run, Lossless(2, 0, 3, (1, 5)), [], "fp8", 0.05)
    over = {GREEDY.name: Interval(-0.2, -0.3, -0.1)}
    report = AcceptanceReport("vllm", "0.32.0", None, Settings(Path("t"), ("a",), "x"), source, [lossy])
    assert codes(report.problems) == ["not-lossless"] and not report.ok
    report.quantized = [DraftResult("fp8", Path("fp8"), "stored", run, lossy.lossless, [], "fp8", 0.05, over)]
    assert [(p.code, p.subject) for p in report.problems] == [("not-lossless", "fp8"), ("over-budget", "fp8")]
