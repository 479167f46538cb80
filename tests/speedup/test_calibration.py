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
    path.write_text(json.dumps(report.record().to_json()))
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
    assert "fit at k = 3, C = 1: measured" in result.stderr  # the residuals at each measured k
    assert "k = 5 lies outside the measured k = 1..4: extrapolated" in result.stderr


def test_explain_fits_at_the_concurrency_given_or_says_why_it_cannot(record: Path, tmp_path: Path) -> None:
    """--fit-at reaches the fit: a record of prompts one at a time has no target alone at several C to fit at."""
    import eaglequant

    dst = tmp_path / "fp8"
    eaglequant.convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    base = ("explain", dst, "--target-config", PAIR / "target", "--acceptance", "2.5@3")
    refusals = {
        ("--fit-at", "4"): "fitting at concurrency 4 needs a measurement, and none is given",
        ("--fit-at", "2", "--measured", record): "the target alone is measured at 0 concurrencies (steady), and "
        "fitting at C = 2 needs two or more",
    }
    for flags, said in refusals.items():
        result = run_cli(*base, *flags)
        last = result.stderr.strip().splitlines()[-1]
        assert result.exit_code == 2 and said in last, result.stderr
    result = run_cli("explain", dst, "--fit-at", "4")
    assert result.exit_code == 2 and "--fit-at prices the target's forwards, and no target is given" in result.stderr


def _edited(record: Path, tmp_path: Path, name: str, change: dict) -> Path:
    data = json.loads(record.read_text())
    for key, value in change.items():
        where = data["settings"] if key == "target" else data
        where[key] = value
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_record_of_another_target_engine_or_device_is_refused_naming_the_field(record: Path, tmp_path: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    other = _edited(record, tmp_path, "other.json", {"target": "Qwen/Qwen3-30B-A3B"})
    with pytest.raises(InputError, match=r"other.json: 'settings.target' is 'qwen3-30b-a3b'"):
        timing_for(target, cost, other)
    engine = _edited(record, tmp_path, "engine.json", {"version": "0.1.0"})
    with pytest.raises(InputError, match=r"engine.json: 'version' is '0.1.0'"):
        timing_for(target, cost, engine)
    cpu = _edited(record, tmp_path, "cpu.json", {"device": "cpu"})
    with pytest.raises(InputError, match=r"cpu.json: 'device' is cpu .* priced on H100 SXM"):
        timing_for(target, cost, cpu)
    from eaglequant.speedup.hardware import with_figures

    own = with_figures(None, 3.35, {"bf16": 1000.0})  # figures of its own (the stand-in's): accepted
    assert timing_for(target, cost, cpu, hardware=own).calibrated_on == "cpu.json's source draft"


def test_a_record_that_is_not_an_accept_record_names_its_own_file(tmp_path: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"engine": "vllm"}))
    with pytest.raises(InputError, match=r"report.json: key 'settings' is missing"):
        timing_for(target, cost, report)


def test_one_servers_record_is_read_its_target_overhead_stated(record: Path, tmp_path: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    server = tmp_path / "server.json"
    greedy = {"acceptance_length": {"value": 2.5, "low": 2.3, "high": 2.7}, "decode_tokens_per_second": 40.0}
    server.write_text(json.dumps({"server": "http://h:8000", "model": "m", "version": "0.32.0", "draft_tokens": 3,
                                  "settings": None, "modes": {"greedy": greedy}, "clock": "engine"}))  # fmt: skip
    fitted = timing_for(target, cost, server)
    assert fitted.target_overhead_s == stated_timing(target).target_overhead_s
    assert fitted.measured_draft_tokens == (3,) and "server.json's server" in (fitted.calibrated_on or "")
    (residual,) = fitted.residuals
    assert residual.draft_tokens == 3 and residual.error == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(InputError, match="one server's record, measured at one load, has no concurrency to fit at"):
        timing_for(target, cost, server, fit_concurrency=4)  # --fit-at is refused, never ignored
    data = json.loads(server.read_text())
    server.write_text(json.dumps({**data, "version": "0.19.0"}))
    with pytest.raises(InputError, match=r"server.json: 'version' is '0.19.0', and the engine release priced is"):
        timing_for(target, cost, server)


def test_the_fit_prints_its_residuals_and_the_measured_k(record: Path) -> None:
    target = target_weights(PAIR / "target")
    (cost,) = inspect(PAIR / "draft").round_costs
    fitted = timing_for(target, cost, record)
    assert [r.draft_tokens for r in fitted.residuals] == [3, 1, 4] and fitted.measured_range == (1, 4)
    assert fitted.extrapolated(8) and not fitted.extrapolated(2)
    assert any(line.startswith("fit at k = 1, C = 1: measured") for line in fitted.assumptions())
