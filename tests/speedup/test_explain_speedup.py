"""``explain DST --target-config T``: the predicted speed-up at each k for each engine that loads DST, from one
acceptance figure or from what the search that chose DST predicted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eaglequant
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"


@pytest.fixture(scope="module")
def fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("speedup") / "fp8"
    eaglequant.convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    return dst


def test_explain_prints_k_against_the_predicted_speedup_with_its_assumptions(fp8: Path) -> None:
    result = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.5@3")
    assert result.exit_code == 0, result.stderr
    assert "predicted decode speed-up over the target alone" in result.stdout
    assert "2.5 at k = 3 (given), carried to other k" in result.stderr  # the assumptions, as notes
    data = json.loads(run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.5@3",
                              "--json").stdout)  # fmt: skip
    (table,) = data["speedup"]
    assert [p["draft_tokens"] for p in table["points"]] == list(range(1, 9))
    assert table["points"][2]["acceptance_length"] == pytest.approx(2.5, abs=1e-4)
    assert table["target"]["read_from"] == "safetensors headers" and table["best_draft_tokens"] in range(1, 9)


def test_the_library_gives_one_table_per_engine_that_loads_the_draft(fp8: Path) -> None:
    tables = eaglequant.predicted_speedup(fp8, PAIR / "target", acceptance={1: 1.7, 3: 2.5}, tensor_parallel_size=2)
    assert [t.draft for t in tables] == ["vLLM 0.32.0"]
    assert tables[0].target.tensor_parallel_size == 2 and [p.draft_tokens for p in tables[0].points] == [1, 3]


def test_without_acceptance_or_target_explain_says_what_to_give(fp8: Path) -> None:
    plain = run_cli("explain", fp8, "--target-config", PAIR / "target")
    assert plain.exit_code == 0 and "no speed-up table" in plain.stderr and "--acceptance 2.62@3" in plain.stderr
    orphan = run_cli("explain", fp8, "--acceptance", "2.5@3")
    assert orphan.exit_code == 2 and "--target-config PATH" in orphan.stderr
    bad = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "lots")
    assert bad.exit_code == 2 and "not LENGTH@K" in bad.stderr
    too_long = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "5@3")
    assert too_long.exit_code == 2 and "must be from 1 to 4" in too_long.stderr
