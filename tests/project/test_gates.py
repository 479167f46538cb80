"""Gates that cannot be bypassed: verify without a source, upload, batch and convert --verify.

A checkpoint whose numerical verification has not passed must never look verified: ``verify`` says so with
its own exit code, ``upload`` (also ``--dry-run``) refuses it unless ``--force``, ``convert --verify`` keeps a
failed output away from DST, and ``batch`` fails such a job on every run. The thresholds applied are the
ones of the scheme the conversion used, custom files included.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from eaglequant import convert, upload, verify
from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_JOBS_FAILED, EXIT_NOT_VERIFIED
from eaglequant.common.findings import codes, find
from eaglequant.schemes.model import scheme_path
from tests.conftest import FIXTURES, run_cli, run_cli_subprocess

OFFLINE = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_eaglequantTESTtoken0123456789"}


def _strict_scheme(tmp_path: Path) -> Path:
    """A copy of fp8-per-channel whose SQNR threshold no conversion meets."""
    text = scheme_path("fp8-per-channel").read_text().replace("min_sqnr_db = 25.0", "min_sqnr_db = 99.0")
    assert "min_sqnr_db = 99.0" in text
    path = tmp_path / "strict.toml"
    path.write_text(text)
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A source that can be moved away afterwards."""
    return Path(shutil.copytree(FIXTURES / "specforge-llama", tmp_path / "src"))


def _dry_run(dst: Path, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli_subprocess("upload", dst, "org/name", "--dry-run", *extra, env=OFFLINE)


@pytest.mark.slow
def test_upload_refuses_what_was_never_verified_numerically(source: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    convert(source, dst)  # no --verify
    moved = source.rename(tmp_path / "moved")
    refused = _dry_run(dst)
    assert refused.returncode == EXIT_CHECK_FAILED
    assert "not verified numerically" in refused.stderr and "a real upload refuses it too" in refused.stderr
    assert "--source" in refused.stderr
    assert _dry_run(dst, "--source", moved).returncode == 0  # verified now, against the source
    forced = _dry_run(dst, "--force", "--json")
    assert forced.returncode == 0 and json.loads(forced.stdout)["verified"] == "not verified numerically"


@pytest.mark.slow
def test_upload_accepts_a_verification_recorded_on_unchanged_files(source: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    convert(source, dst, verify_output=True)
    source.rename(tmp_path / "moved")
    passed = _dry_run(dst, "--json")
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["verified"] == "not verified numerically"  # nothing ran fresh...
    assert "verified-at-conversion" in codes(upload(dst, "org/name", dry_run=True).notes)  # ...the record vouches
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"]["exclude"].append("re:^nothing$")
    (dst / "config.json").write_text(json.dumps(config))
    changed = _dry_run(dst)
    assert changed.returncode == EXIT_CHECK_FAILED and "config.json" in changed.stderr


@pytest.mark.slow
def test_a_failed_convert_verify_leaves_dst_alone(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = run_cli("convert", FIXTURES / "specforge-llama", dst, "--scheme", _strict_scheme(tmp_path), "--verify")
    assert result.exit_code == EXIT_CHECK_FAILED
    failed = tmp_path / "out.verify-failed"
    assert not dst.exists() and (failed / "model.safetensors").is_file()
    assert "upload` refuses it" in result.stderr and str(failed) in result.stderr
    recorded = json.loads((failed / "eaglequant_verify.json").read_text())
    assert recorded["verdict"] == "failed" and recorded["thresholds"]["min_sqnr_db"] == 99.0  # the file's, not 25
    assert "FAILED" in (failed / "README.md").read_text()
    assert _dry_run(failed).returncode == EXIT_CHECK_FAILED
    # the next run replaces the diverted output; a good conversion then goes to DST
    again = run_cli("convert", FIXTURES / "specforge-llama", dst, "--scheme", _strict_scheme(tmp_path), "--verify")
    assert again.exit_code == EXIT_CHECK_FAILED and not dst.exists()
    good = run_cli("convert", FIXTURES / "specforge-llama", dst, "--verify")
    assert good.exit_code == 0 and dst.is_dir()


def test_verify_applies_the_recorded_scheme(tmp_path: Path) -> None:
    """A custom scheme's thresholds are recorded at conversion and applied by verify later."""
    dst = tmp_path / "out"
    convert(FIXTURES / "specforge-llama", dst, scheme=str(_strict_scheme(tmp_path)))
    report = json.loads((dst / "eaglequant_report.json").read_text())
    assert "min_sqnr_db = 99.0" in report["scheme_toml"]
    result = run_cli("verify", dst, "--source", FIXTURES / "specforge-llama", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == EXIT_CHECK_FAILED and data["thresholds"]["min_sqnr_db"] == 99.0
    assert any(layer["failed"] and layer["sqnr_db"] < 99.0 for layer in data["layers"])


@pytest.mark.slow
def test_verify_of_another_tools_checkpoint_says_whose_thresholds(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    convert(FIXTURES / "specforge-llama", dst)
    (dst / "eaglequant_report.json").unlink()
    result = run_cli("verify", dst, "--source", FIXTURES / "specforge-llama", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["scheme"] == "fp8-per-channel"
    fallback = find(verify(dst, source=FIXTURES / "specforge-llama").notes, "no-recorded-scheme")
    assert fallback is not None and fallback.subject == "fp8-per-channel"


JOBS = """
[[job]]
name = "strict"
source = "{source}"
destination = "out/strict"
scheme = "{scheme}"
"""


@pytest.mark.slow
def test_batch_fails_a_job_whose_verification_fails_on_every_run(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(JOBS.format(source=FIXTURES / "specforge-llama", scheme=_strict_scheme(tmp_path)))
    for _ in range(2):
        result = run_cli("batch", jobs, "--summary", tmp_path / "summary.json", "--json")
        assert result.exit_code == EXIT_JOBS_FAILED
        job = json.loads(result.stdout)["jobs"][0]
        assert job["status"] == "failed" and "verify failed" in job["reason"] and "verify-failed" in job["reason"]
        assert not (tmp_path / "out" / "strict").exists()


@pytest.mark.slow
def test_batch_retries_a_destination_whose_recorded_verification_failed_and_only_that(tmp_path: Path) -> None:
    """An output left with a failed verification (by an older eaglequant) is converted again, not skipped; one left
    inconclusive is done (converting it again would only say so again)."""
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(JOBS.format(source=FIXTURES / "specforge-llama", scheme="fp8-per-channel"))
    assert run_cli("batch", jobs, "--summary", tmp_path / "s.json").exit_code == 0
    dst = tmp_path / "out" / "strict"
    recorded = dst / "eaglequant_verify.json"
    data = json.loads(recorded.read_text())
    for verdict, status in (("inconclusive", "skipped"), ("failed", "converted")):
        recorded.write_text(json.dumps({**data, "ok": verdict != "failed", "verdict": verdict}))
        report = json.loads((dst / "eaglequant_report.json").read_text())  # as if written so: hashes agree
        report["verification"] = {"ok": verdict != "failed", "verdict": verdict}
        report["files"]["eaglequant_verify.json"] = hashlib.sha256(recorded.read_bytes()).hexdigest()
        (dst / "eaglequant_report.json").write_text(json.dumps(report))
        again = run_cli("batch", jobs, "--summary", tmp_path / "s.json", "--json")
        job = json.loads(again.stdout)["jobs"][0]
        assert job["status"] == status, (verdict, job)
        if status == "converted":
            assert job["reason"] == "its recorded verification failed"
        else:
            assert job["verified"] is True and json.loads(recorded.read_text())["verdict"] == verdict
    assert json.loads(recorded.read_text())["ok"] is True


def test_explain_checks_the_engines_the_checkpoint_was_made_for(tmp_path: Path) -> None:
    dst = tmp_path / "mla8"
    convert(FIXTURES / "torchspec-mla", dst, format="modelopt")  # for vLLM only
    assert run_cli("explain", dst).exit_code == 0
    every = run_cli("explain", dst, "--engine", "all", "--json")
    engines = {e["engine"] for e in json.loads(every.stdout)["engines"]}
    assert engines == {"vllm", "vllm==0.33.0", "trtllm", "sglang", "trtllm-main"}
    assert every.exit_code == EXIT_CHECK_FAILED  # TensorRT-LLM main keeps MLA kv_b_proj BF16


def test_verify_exit_codes_are_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert f"| {EXIT_NOT_VERIFIED} |" in text
