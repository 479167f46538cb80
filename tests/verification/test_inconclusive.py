"""An "inconclusive" verdict: a change in acceptance whose interval straddles its budget is neither a pass nor a
failure, says how many prompts more would settle it, and ends ``verify`` with its own exit code (7), apart from a
failure (3).

The count of prompts is checked against the clustered estimator itself: the bundled pair's per-sequence
counters, repeated whole, give the interval the count assumes at that many prompts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE
from eaglequant.measurement.statistics import (
    Acceptance,
    Interval,
    Outcome,
    PromptCounts,
    budget_verdict,
    paired_difference,
    prompts_to_settle,
    t_quantile,
)
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"


@pytest.mark.parametrize(
    ("interval", "outcome"),
    [
        (Interval(-0.010, -0.020, 0.000), Outcome.WITHIN),
        (Interval(-0.030, -0.050, -0.010), Outcome.WITHIN),  # the bound on the budget passes
        (Interval(-0.200, -0.300, -0.100), Outcome.PAST),
        (Interval(-0.014, -0.074, 0.046), Outcome.INCONCLUSIVE),  # the 12 prompts
        (Interval(-0.060, -0.100, -0.020), Outcome.INCONCLUSIVE),  # estimate past, but not the whole interval
        (Interval(-0.012, -math.inf, math.inf), Outcome.INCONCLUSIVE),  # one prompt: no spread
        (Interval(math.nan, math.nan, math.nan), Outcome.PAST),  # no drafts: nothing to pass on
    ],
)
def test_three_way_verdict(interval: Interval, outcome: Outcome) -> None:
    verdict = budget_verdict(interval, 0.05, 12)
    assert verdict.outcome is outcome
    assert ("inconclusive" in verdict.text()) is (outcome is Outcome.INCONCLUSIVE)


def _paired(drafts: list[tuple[int, int]], source: list[tuple[int, int]]) -> Interval:
    def acceptance(rows: list[tuple[int, int]]) -> Acceptance:
        return Acceptance(tuple(PromptCounts(d, a, (), ()) for d, a in rows))

    return paired_difference(acceptance(drafts), acceptance(source))


def test_the_count_is_what_the_estimator_gives_at_that_many_prompts() -> None:
    """m prompts repeated k times give the interval at n = k*m prompts at the same variance: its half-width is
    t(n - 1) * se * sqrt((m - 1) / (n - 1)), what the count is solved from, and the count is the least n that fits."""
    quantized = [(10, 14), (12, 12), (9, 16), (11, 13), (10, 15), (13, 11)]
    source = [(10, 15), (11, 15), (9, 15), (11, 14), (10, 15), (12, 14)]
    m, budget = len(quantized), 0.2
    difference = _paired(quantized, source)
    assert difference.low < -budget < difference.high
    more = prompts_to_settle(difference, budget, m)
    assert more is not None and more > 0
    se = difference.half_width / t_quantile(m - 1)
    for k in (2, 3, 5, 8):
        n = k * m
        tiled = _paired(quantized * k, source * k)
        assert tiled.value == pytest.approx(difference.value, abs=1e-12)
        expected = t_quantile(n - 1) * se * math.sqrt((m - 1) / (n - 1))
        assert tiled.half_width == pytest.approx(expected, rel=1e-9)
        settled = budget_verdict(tiled, budget, n).outcome is not Outcome.INCONCLUSIVE
        assert settled is (n >= m + more), (n, m + more)

    def fits(n: int) -> bool:
        return t_quantile(n - 1) * se * math.sqrt((m - 1) / (n - 1)) <= abs(difference.value + budget)

    assert fits(m + more) and not fits(m + more - 1)


def test_an_estimate_on_the_budget_is_never_settled() -> None:
    verdict = budget_verdict(Interval(-0.05, -0.07, -0.03), 0.05, 24)
    assert verdict.inconclusive and verdict.more_prompts is None
    assert "no count of prompts would settle it" in verdict.text()


@pytest.fixture(scope="module")
def fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's conversion: the bundled draft to FP8 per channel in Quark's format."""
    dst = tmp_path_factory.mktemp("inconclusive") / "x"
    result = run_cli("convert", PAIR / "draft", dst, "--scheme", "fp8-per-channel", "--format", "quark")
    assert result.exit_code == 0, result.stderr
    return dst


def test_the_readme_conversion_on_the_bundled_prompts_is_never_a_problem(
    fp8: Path, pair_captured: Callable[[str], Path]
) -> None:
    inputs = pair_captured("trained-pair")
    result = run_cli("verify", fp8, "--source", PAIR / "draft", "--inputs", inputs, "--max-draft-tokens", "3")
    assert result.exit_code in (0, EXIT_INCONCLUSIVE), result.stdout
    assert "problem" not in result.stdout
    if result.exit_code == EXIT_INCONCLUSIVE:
        assert "more would settle it" in result.stdout


def test_a_straddling_interval_is_inconclusive_with_its_own_exit_code(
    tmp_path: Path, pair_captured: Callable[[str], Path]
) -> None:
    """A scheme copied with a budget of 0.005 tokens: the 24 sequences' interval of the FP8 change (about
    -0.01 to +0.02) straddles it, so verify says so, with the count, and exits 7, not 3."""
    text = (Path(__file__).parents[2] / "schemes" / "fp8-per-channel.toml").read_text()
    scheme = tmp_path / "fp8-tight.toml"
    scheme.write_text(
        text.replace('name = "fp8-per-channel"', 'name = "fp8-tight"').replace(
            "max_acceptance_drop = 0.05", "max_acceptance_drop = 0.005"
        )
    )
    dst = tmp_path / "tight"
    assert run_cli("convert", PAIR / "draft", dst, "--scheme", scheme, "--format", "quark").exit_code == 0
    args = ("verify", dst, "--source", PAIR / "draft", "--inputs", pair_captured("trained-pair"))
    shown = run_cli(*args, "--max-draft-tokens", "3")
    assert shown.exit_code == EXIT_INCONCLUSIVE != EXIT_CHECK_FAILED, shown.stdout
    assert "inconclusive" in shown.stdout and "more would settle it at this variance" in shown.stdout
    assert "problem" not in shown.stdout
    written = run_cli(*args, "--max-draft-tokens", "3", "--json")
    assert written.exit_code == EXIT_INCONCLUSIVE
    report = json.loads(written.stdout)
    assert report["verdict"] == "inconclusive" and report["ok"] is False and report["problems"] == []
    assert [f["code"] for f in report["unsettled"]] == ["acceptance-inconclusive"]
    acceptance = report["acceptance"]
    assert acceptance["outcome"] == "inconclusive" and acceptance["failed"] is False
    assert acceptance["more_sequences"] > 0


def test_convert_verify_writes_an_inconclusive_output_and_upload_refuses_it(
    tmp_path: Path, pair_captured: Callable[[str], Path]
) -> None:
    """NVFP4 (calibrated on the capture, which verify then predicts on) against a budget of 0.06 tokens: its change,
    about -0.10 [-0.19, -0.01], straddles it. No check failed, so DST is written, and the command exits 7; upload,
    whose own verify predicts nothing, refuses it for the inconclusive verification the conversion recorded."""
    text = (Path(__file__).parents[2] / "schemes" / "nvfp4.toml").read_text()
    scheme = tmp_path / "nvfp4-tight.toml"
    scheme.write_text(
        text.replace('name = "nvfp4"', 'name = "nvfp4-tight"').replace(
            "max_acceptance_drop = 0.15", "max_acceptance_drop = 0.06"
        )
    )
    dst, inputs = tmp_path / "dst", pair_captured("trained-pair")
    args = ("--scheme", scheme, "--format", "modelopt", "--calib", inputs, "--verify")
    converted = run_cli("convert", PAIR / "draft", dst, *args)
    assert converted.exit_code == EXIT_INCONCLUSIVE, converted.stdout + converted.stderr
    assert dst.is_dir() and not dst.with_name("dst.verify-failed").exists()
    assert json.loads((dst / "eaglequant_verify.json").read_text())["verdict"] == "inconclusive"
    uploaded = run_cli("upload", dst, "org/draft", "--dry-run")
    assert uploaded.exit_code == EXIT_CHECK_FAILED and "inconclusive" in uploaded.stderr, uploaded.stderr
