"""``search --objective speedup``: every candidate predicted, the candidate and k of the highest predicted speed-up
within the budget at that k, the runner-up named, the card serving that k."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglequant.record.search import read_search
from eaglequant.search.smallest import search
from eaglequant.speedup.model import predict_speedup
from eaglequant.speedup.target_step import target_weights
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
SCHEMES = ("fp8-per-channel", "int8", "nvfp4")


@pytest.fixture(scope="module")
def fastest(pair_captured: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> tuple:  # type: ignore[type-arg]
    dst = tmp_path_factory.mktemp("fastest") / "dst"
    found = search(PAIR / "draft", dst, inputs=pair_captured("trained-pair"), max_acceptance_drop="0.05",
                   schemes=SCHEMES, objective="speedup", target=PAIR / "target", max_draft_tokens=4)  # fmt: skip
    return found, dst


def test_every_candidate_is_predicted_and_the_pick_is_the_highest_speedup_within_the_budget(fastest: tuple) -> None:  # type: ignore[type-arg]
    found, _ = fastest
    assert found.pick is not None and found.chosen is found.points[found.pick.index]
    assert all(point.prediction is not None for point in found.points)
    weights = target_weights(PAIR / "target")
    best = []
    for point in found.points:
        within = found.budget.change_within
        rows = [r for r in point.prediction.by_draft_tokens if within(r.difference, found.budget_tokens)]
        if rows:
            lengths = {r.draft_tokens: r.quantized.value for r in rows}
            table = predict_speedup("x", weights, point.candidate.round_cost, lengths, found.speed.timing)
            best.append((table.best.speedup, point.candidate.label, table.best_draft_tokens))
    top = max(best, key=lambda entry: entry[0])
    assert (found.pick.speedup, found.chosen.candidate.label, found.pick.draft_tokens) == pytest.approx(top)
    assert found.pick.runner_up is not None and found.pick.runner_up[2] <= found.pick.speedup
    assert f"at k = {found.pick.draft_tokens}" in found.stopped and "runner-up" in found.stopped


def test_the_record_and_the_card_serve_the_chosen_k(fastest: tuple) -> None:  # type: ignore[type-arg]
    found, dst = fastest
    record = read_search(dst)
    assert record is not None and record.objective == "speedup" and record.speedup is not None
    assert record.speedup.draft_tokens == found.pick.draft_tokens
    assert record.speedup.speedup == pytest.approx(found.pick.speedup, abs=1e-4)
    card = (dst / "README.md").read_text()
    assert f'"num_speculative_tokens": {found.pick.draft_tokens}' in card
    assert f"**k = {found.pick.draft_tokens}**" in card and "## Predicted speed-up" in card


def test_the_objective_needs_a_target_and_a_known_objective(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    inputs = pair_captured("trained-pair")
    args = ("search", PAIR / "draft", tmp_path / "x", "--inputs", inputs, "--max-acceptance-drop", "0.05")
    wrong = run_cli(*args, "--objective", "fastest")
    assert wrong.exit_code == 2 and "--objective 'fastest': not one of bytes, speedup" in wrong.stderr
    config = json.loads((PAIR / "target" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    missing = run_cli(*args, "--objective", "speedup", "--target", tmp_path / "nowhere")
    assert missing.exit_code == 2 and "--target" in missing.stderr and "no config.json" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_the_speedup_objective_defaults_to_the_target_the_capture_records(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    from eaglequant.common.errors import InputError
    from eaglequant.search.fastest import objective_target

    inputs = pair_captured("trained-pair")
    assert Path(objective_target("speedup", None, inputs) or "").resolve() == (PAIR / "target").resolve()
    assert objective_target("speedup", tmp_path, inputs) == tmp_path  # a target given wins
    assert objective_target("bytes", tmp_path, inputs) is None  # the bytes objective prices no target
    with pytest.raises(InputError, match="no target is known"):
        objective_target("speedup", None, tmp_path / "no-capture.safetensors")
