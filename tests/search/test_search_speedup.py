"""``search --objective speedup``: every candidate predicted, the candidate and k of the highest predicted speed-up
within the budget at that k (a tie within the model's error going to fewer bytes, and named), the runner-up named,
the card serving that k; a predicted slowdown is "do not speculate", exit 3 and nothing written; a k for each load
served as vLLM's ``num_speculative_tokens_per_batch_size``, which vLLM's own validator accepts."""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eaglequant.record.search import read_search
from eaglequant.search import fastest as fastest_module
from eaglequant.search.smallest import search
from eaglequant.speedup.model import predict_speedup
from eaglequant.speedup.target_step import target_weights
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
KIMI = FIXTURES / "targets" / "kimi-k2.5-pair-width" / "config.json"  # a target the pair's small drafts speed up
SCHEMES = ("fp8-per-channel", "int8", "nvfp4")


@pytest.fixture(scope="module")
def fastest(pair_captured: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> tuple:  # type: ignore[type-arg]
    dst = tmp_path_factory.mktemp("fastest") / "dst"
    found = search(PAIR / "draft", dst, inputs=pair_captured("trained-pair"), max_acceptance_drop="0.05",
                   schemes=SCHEMES, objective="speedup", target=KIMI, tensor_parallel_size=8,
                   max_draft_tokens=4)  # fmt: skip
    return found, dst


def _best_within(found: Any) -> list[tuple[float, float, float, str, int]]:
    """Each predicted candidate's best k within the budget, recomputed: (speed-up, low, high, label, k), in the
    search's order (fewest bytes first)."""
    weights = target_weights(KIMI, 8)
    best = []
    for point in found.points:
        within = found.budget.change_within
        rows = [r for r in point.prediction.by_draft_tokens if within(r.difference, found.budget_tokens)]
        if rows:
            lengths = {r.draft_tokens: r.quantized.value for r in rows}
            top = predict_speedup("x", weights, point.candidate.round_cost, lengths, found.speed.timing).best
            best.append((top.speedup, top.low, top.high, point.candidate.label, top.draft_tokens))
    return best


def test_every_candidate_is_predicted_and_a_tie_within_the_model_error_goes_to_the_fewest_bytes(
    fastest: tuple,  # type: ignore[type-arg]
) -> None:
    found, _ = fastest
    assert found.pick is not None and found.chosen is found.points[found.pick.index]
    assert all(point.prediction is not None for point in found.points)
    best = _best_within(found)
    top = max(best, key=lambda entry: entry[0])
    tied = [entry for entry in best if entry[2] >= top[1] and entry[1] <= top[2]]  # intervals overlapping the top's
    pick = tied[0]  # the fewest bytes among them
    assert (found.pick.speedup, found.chosen.candidate.label, found.pick.draft_tokens) == pytest.approx(
        (pick[0], pick[3], pick[4])
    )
    assert len(tied) > 1  # the bundled drafts' speed-ups differ by less than the model's error
    assert {plan.draft for plan in found.pick.tied} == {entry[3] for entry in tied} - {pick[3]}
    assert "a tie within the model's error" in found.stopped and "fewest bytes" in found.stopped
    if pick is not top:
        assert found.pick.highest.draft == top[3] and f"the highest predicted: {top[3]}" in found.stopped


def test_the_record_and_the_card_serve_the_chosen_k_and_name_the_tie(fastest: tuple) -> None:  # type: ignore[type-arg]
    found, dst = fastest
    record = read_search(dst)
    assert record is not None and record.objective == "speedup" and record.speedup is not None
    speed = record.speedup
    assert speed.draft_tokens == found.pick.draft_tokens and speed.speculate
    assert speed.speedup == pytest.approx(found.pick.speedup, abs=1e-4)
    assert (speed.low, speed.high) == pytest.approx((found.pick.plan.low, found.pick.plan.high), abs=1e-4)
    assert speed.tied == tuple(plan.draft for plan in found.pick.tied) and speed.tied
    assert speed.num_speculative_tokens_per_batch_size == ()  # one load: one k, no schedule
    card = (dst / "README.md").read_text()
    assert f'"num_speculative_tokens": {found.pick.draft_tokens}' in card
    assert "num_speculative_tokens_per_batch_size" not in card
    assert f"**k = {found.pick.draft_tokens}**" in card and "## Predicted speed-up" in card
    assert f"**{speed.speedup:.3f}×** [{speed.low:.3f}, {speed.high:.3f}]" in card
    assert "A tie within the model's error" in card


def test_a_predicted_slowdown_is_do_not_speculate_exit_3_and_nothing_written(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    # the trained pair's own target is so small that a draft round costs more than the tokens it saves
    dst = tmp_path / "dst"
    done = run_cli("search", PAIR / "draft", dst, "--inputs", pair_captured("trained-pair"), "--max-acceptance-drop",
                   "0.05", "--scheme", "fp8-per-channel", "--objective", "speedup", "--max-draft-tokens", "4",
                   "--json")  # fmt: skip
    assert done.exit_code == 3, done.stderr
    written = json.loads(done.stdout)
    assert written["stopped"].startswith("do not speculate at this load: no candidate's predicted speed-up beats")
    assert written["chosen"] is None and written["destination"] is None
    speed = written["speedup"]
    assert (
        not speed["speculate"] and speed["speedup"] == 1.0 and [load["draft_tokens"] for load in speed["loads"]] == [0]
    )
    assert max(at["speedup"] for at in speed["loads"][0]["by_draft_tokens"]) < 1.0
    assert not dst.exists() and list(tmp_path.iterdir()) == []  # no DST, no stage left behind


def test_a_candidate_within_the_budget_only_at_another_k_than_3_is_written(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    # was: "error: .../.dst.eaglequant-tmp-...: does not exist" (exit 2): its stage was removed by the k = 3 verdict
    dst = tmp_path / "dst"
    done = run_cli("search", PAIR / "draft", dst, "--inputs", pair_captured("trained-pair"), "--max-acceptance-drop",
                   "0.0001", "--scheme", "fp8-per-channel", "--objective", "speedup", "--target", KIMI,
                   "--tensor-parallel-size", "8", "--max-draft-tokens", "4")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    record = read_search(dst)
    assert record is not None and record.chosen is not None and record.speedup is not None
    assert record.chosen.within_budget is False  # not within at k = 3, the bug's case
    assert record.speedup.draft_tokens != 3


def test_no_candidate_within_the_budget_at_any_k_is_exit_3_and_nothing_written(
    pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    dst = tmp_path / "dst"
    done = run_cli("search", PAIR / "draft", dst, "--inputs", pair_captured("trained-pair"), "--max-acceptance-drop",
                   "0.0001", "--scheme", "nvfp4", "--objective", "speedup", "--target", KIMI, "--max-draft-tokens",
                   "4")  # fmt: skip
    assert done.exit_code == 3, done.stderr
    assert "no candidate is within the budget at any k" in done.stdout and "none within the budget" in done.stdout
    assert not dst.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "value"), [("--measured", "accept.json"), ("--concurrency", "1,2"), ("--target", "t"),
                        ("--tensor-parallel-size", "8")]
)  # fmt: skip
def test_the_speed_objective_options_without_it_are_refused_in_one_line(
    flag: str, value: str, pair_captured: Callable[[str], Path], tmp_path: Path
) -> None:
    done = run_cli("search", PAIR / "draft", tmp_path / "x", "--inputs", pair_captured("trained-pair"),
                   "--max-acceptance-drop", "0.05", flag, value)  # fmt: skip
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"{flag} " in done.stderr and "--objective speedup" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_bad_concurrency_is_one_line(pair_captured: Callable[[str], Path], tmp_path: Path) -> None:
    done = run_cli("search", PAIR / "draft", tmp_path / "x", "--inputs", pair_captured("trained-pair"),
                   "--max-acceptance-drop", "0.05", "--objective", "speedup", "--target", KIMI, "--concurrency",
                   "1-6")  # fmt: skip
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--concurrency '1-6'" in done.stderr and "powers of two" in done.stderr


LOADS = "1,4,16"


@pytest.fixture(scope="module")
def scheduled(pair_captured: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:  # type: ignore[type-arg]
    """``search --concurrency 1,4,16`` through the CLI, the model's batch-1 tables scaled down by concurrency and k
    (a stand-in for the model at concurrency, which this test does not judge: one where a long k stops paying
    first, and at 16 no k pays)."""
    real = fastest_module.predict_speedup

    def at_load(*args: Any, concurrency: int = 1) -> Any:
        table = real(*args)
        scale = [1 - 0.12 * p.draft_tokens * math.log2(concurrency) for p in table.points]
        points = tuple(
            replace(p, speedup=p.speedup * f, low=p.low * f, high=p.high * f)
            for p, f in zip(table.points, scale, strict=True)
        )
        return replace(table, points=points, concurrency=concurrency)

    dst = tmp_path_factory.mktemp("scheduled") / "dst"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fastest_module, "predict_speedup", at_load)
        done = run_cli("search", PAIR / "draft", dst, "--inputs", pair_captured("trained-pair"),
                       "--max-acceptance-drop", "0.05", "--scheme", "fp8-per-channel", "--objective", "speedup",
                       "--target", KIMI, "--tensor-parallel-size", "8", "--max-draft-tokens", "4", "--concurrency",
                       LOADS)  # fmt: skip
    assert done.exit_code == 0, done.stderr
    yield done, dst


def _served_spec(card: str) -> dict[str, Any]:
    """The --speculative-config JSON of the card's vLLM serving line."""
    found = re.search(r"vllm serve \S+ --speculative-config '([^']+)'", card)
    assert found is not None, card
    return dict(json.loads(found.group(1)))


def test_each_load_gets_its_k_and_the_card_serves_them_as_vllm_schedule(scheduled: tuple) -> None:  # type: ignore[type-arg]
    done, dst = scheduled
    record = read_search(dst)
    assert record is not None and record.speedup is not None
    speed = record.speedup
    ks = {load.concurrency: load.draft_tokens for load in speed.loads}
    assert list(ks) == [1, 4, 16] and ks[16] == 0 and ks[1] > ks[4] > 0
    for load in speed.loads:  # each load's k is its best point, or 0 where none beats the target alone
        best = max(load.by_draft_tokens, key=lambda at: (at.speedup, -at.draft_tokens))
        assert load.draft_tokens == (best.draft_tokens if best.speedup > 1 else 0)
    assert speed.num_speculative_tokens_per_batch_size == ((1, 3, ks[1]), (4, 15, ks[4]), (16, 16, 0))
    assert speed.speedup == pytest.approx(sum(load.speedup for load in speed.loads) / 3, abs=1e-3)
    spec = _served_spec((dst / "README.md").read_text())
    assert spec["num_speculative_tokens"] == ks[1] and spec["method"] == "eagle3"
    assert spec["num_speculative_tokens_per_batch_size"] == [
        list(r) for r in speed.num_speculative_tokens_per_batch_size
    ]
    assert "do not speculate at this load" in done.stdout and "num_speculative_tokens_per_batch_size" in done.stdout


@pytest.mark.engine
def test_vllm_own_validator_accepts_the_schedule_the_card_serves(scheduled: tuple) -> None:  # type: ignore[type-arg]
    from tests.engine_load.test_engine_load import engine_python

    _, dst = scheduled
    spec = _served_spec((dst / "README.md").read_text())
    probe = (
        "import json, sys\n"
        "from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup as lookup, "
        "validate_and_normalize_dynamic_sd_schedule as validate\n"
        "spec = json.loads(sys.argv[1])\n"
        "schedule = spec['num_speculative_tokens_per_batch_size']\n"
        "print(json.dumps([validate(schedule), lookup(schedule, 20, spec['num_speculative_tokens'])]))\n"
    )
    ran = subprocess.run([str(engine_python("vllm")), "-c", probe, json.dumps(spec)], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    normalized, dense = json.loads(ran.stdout.strip().splitlines()[-1])
    assert normalized == spec["num_speculative_tokens_per_batch_size"]
    record = read_search(dst)
    assert record is not None and record.speedup is not None
    ks = {load.concurrency: load.draft_tokens for load in record.speedup.loads}
    assert [dense[c] for c in ks] == list(ks.values())  # each load runs at its own k in vLLM
    assert dense[17:] == [0] * 4  # past the last load, vLLM carries its k on


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
    assert objective_target("bytes", None, inputs) is None  # the bytes objective prices no target
    with pytest.raises(InputError, match="only objective='speedup' uses it"):
        objective_target("bytes", tmp_path, inputs)  # and takes none
    with pytest.raises(InputError, match="no target is known"):
        objective_target("speedup", None, tmp_path / "no-capture.safetensors")
