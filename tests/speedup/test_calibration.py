"""``--measured ACCEPT.json``: the model's terms fitted to the source draft's rounds an ``accept`` record timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglequant import inspect
from eaglequant.common.errors import InputError
from eaglequant.measurement.speed import measured_speeds
from eaglequant.speedup.calibration import timing_for
from eaglequant.speedup.model import calibrate, stated_timing
from eaglequant.speedup.target_step import target_weights
from tests.conftest import FIXTURES, run_cli
from tests.measurement.test_speed import several_k

PAIR = FIXTURES / "trained-pair"


@pytest.fixture()
def record(tmp_path: Path) -> Path:
    report, _ = several_k(tmp_path, (3, 1, 4))
    path = tmp_path / "accept.json"
    path.write_text(json.dumps(report.to_json()))
    return path


def test_the_terms_are_fitted_to_the_source_drafts_rounds_of_the_record(record: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    fitted = timing_for(target, cost, record)
    rounds = [m for m in measured_speeds(json.loads(record.read_text())) if m.label == "source"]
    assert [m.draft_tokens for m in rounds] == [3, 1, 4]
    assert fitted == calibrate(target, cost.as_source(), rounds, stated_timing(target), "accept.json's source draft")
    assert fitted.target_overhead_s > stated_timing(target).target_overhead_s  # the stand-in's 5 s a prompt
    assert timing_for(target, cost, None) == stated_timing(target)


def test_a_record_that_is_missing_or_untimed_is_one_line(tmp_path: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    with pytest.raises(InputError, match="no such file"):
        timing_for(target, cost, tmp_path / "none.json")
    untimed = tmp_path / "untimed.json"
    untimed.write_text(json.dumps({"engine": "vllm"}))
    with pytest.raises(InputError):
        timing_for(target, cost, untimed)


def test_explain_says_the_terms_were_fitted_to_the_record(record: Path, tmp_path: Path) -> None:
    import eaglequant

    dst = tmp_path / "fp8"
    eaglequant.convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    result = run_cli("explain", dst, "--target-config", PAIR / "target", "--acceptance", "2.5@3", "--measured", record)
    assert result.exit_code == 0, result.stderr
    assert "fitted to accept.json's source draft" in result.stderr
