"""The report is the record: ``eaglequant_report.json`` read and written through one typed, versioned type."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import eaglequant
from eaglequant.common.errors import EXIT_BAD_INPUT
from eaglequant.record.report import (
    REPORT_NAME,
    REPORT_VERSION,
    ConversionReport,
    NewerReportError,
    ReportError,
    read_report,
)
from eaglequant.verification.verdict import recorded_verdict
from tests.conftest import FIXTURES, run_cli


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("report") / "mla-nvfp4"
    eaglequant.convert(
        FIXTURES / "torchspec-mla", dst, scheme="nvfp4", format="modelopt", target_layers=61, verify_output=True
    )
    return dst


def _copy_with(verified: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    dst = Path(shutil.copytree(verified, tmp_path / "copy"))
    data = json.loads((dst / REPORT_NAME).read_text())
    edit(data)
    (dst / REPORT_NAME).write_text(json.dumps(data, indent=2))
    return dst


def test_a_written_report_round_trips_byte_for_byte(verified: Path) -> None:
    text = (verified / REPORT_NAME).read_text(encoding="utf-8")
    data = json.loads(text)
    report = ConversionReport.from_json(data)
    assert report.to_json() == data and report.to_text() == text
    assert list(data)[:2] == ["eaglequant_version", "report_version"] and data["report_version"] == REPORT_VERSION
    assert report.verification is not None and report.verification.ok and report.verification.verdict == "passed"
    assert report.target_layers.count == 61 and report.engines == ("vllm",)
    assert "[verify]" in report.scheme_toml and report.manifest is not None and report.card is not None


def test_a_report_written_before_versioning_is_read_as_version_1(verified: Path, tmp_path: Path) -> None:
    def unversioned(data: dict) -> None:
        del (
            data["report_version"],
            data["verification"],
            data["round_costs"],
            data["config_changes"],
            data["own_schemes"],
        )
        del data["target_layers"]["context"]
        _plain_notes(data)

    dst = _copy_with(verified, tmp_path, unversioned)
    data = json.loads((dst / REPORT_NAME).read_text())
    report = read_report(dst)
    assert report is not None and report.report_version == 1 and report.verification is None
    assert report.to_json() == data  # a version-1 report stays version 1 when written back
    assert eaglequant.explain(dst).ok


def test_a_version_2_report_is_read_without_round_costs(verified: Path, tmp_path: Path) -> None:
    def version_2(data: dict) -> None:
        del data["round_costs"], data["config_changes"], data["own_schemes"], data["target_layers"]["context"]
        data["report_version"] = 2
        _plain_notes(data)

    dst = _copy_with(verified, tmp_path, version_2)
    report = read_report(dst)
    assert report is not None and report.report_version == 2 and report.round_costs == ()
    assert report.to_json() == json.loads((dst / REPORT_NAME).read_text())


def test_a_version_3_report_is_read_without_config_changes_or_the_targets_context(
    verified: Path, tmp_path: Path
) -> None:
    def version_3(data: dict) -> None:
        del data["config_changes"], data["own_schemes"], data["target_layers"]["context"]
        data["report_version"] = 3
        _plain_notes(data)

    dst = _copy_with(verified, tmp_path, version_3)
    report = read_report(dst)
    assert report is not None and report.config_changes == () and report.target_layers.context is None
    assert report.to_json() == json.loads((dst / REPORT_NAME).read_text())


def _plain_notes(data: dict) -> None:
    """The notes as reports before version 5 wrote them: each its message alone."""
    data["notes"] = [note["message"] for note in data["notes"]]


def test_a_version_4_report_reads_its_notes_as_unrecorded_findings(verified: Path, tmp_path: Path) -> None:
    def version_4(data: dict) -> None:
        data["report_version"] = 4
        _plain_notes(data)

    written = read_report(verified)
    dst = _copy_with(verified, tmp_path, version_4)
    report = read_report(dst)
    assert written is not None and written.notes and all(note.code != "unrecorded" for note in written.notes)
    assert report is not None and report.report_version == 4
    assert [(n.code, n.subject, n.message) for n in report.notes] == [
        ("unrecorded", "", n.message) for n in written.notes
    ]
    assert report.to_json() == json.loads((dst / REPORT_NAME).read_text())  # written back as version 4


def test_the_report_records_the_cost_of_a_round_per_engine(verified: Path) -> None:
    report = read_report(verified)
    assert report is not None and [cost.engine for cost in report.round_costs] == list(report.engines)
    cost = report.round_costs[0]
    assert cost.draft_tokens == 3 and cost.bytes_per_round < cost.source_bytes_per_round
    decoder = cost.part("decoder")
    assert decoder is not None and decoder.quantized and decoder.reads == 3


def test_a_report_from_a_newer_eaglequant_is_refused(verified: Path, tmp_path: Path) -> None:
    dst = _copy_with(verified, tmp_path, lambda data: data.update(report_version=REPORT_VERSION + 1, new_key=1))
    with pytest.raises(NewerReportError) as raised:
        read_report(dst)
    message = str(raised.value)
    assert "\n" not in message and str(dst / REPORT_NAME) in message and "upgrade eaglequant" in message
    result = run_cli("verify", dst)
    assert result.exit_code == EXIT_BAD_INPUT and "upgrade eaglequant" in result.stderr


@pytest.mark.parametrize(
    ("key", "edit"),
    [
        ("quantized[0].sqnr_db", lambda data: data["quantized"][0].update(sqnr_db="high")),
        ("engines", lambda data: data.update(engines="vllm")),
        ("target_layers.count", lambda data: data["target_layers"].update(count="61")),
        ("manifest.key", lambda data: data["manifest"].pop("key")),
        ("report_version", lambda data: data.update(report_version=True)),
        ("surprise", lambda data: data.update(surprise=1)),
    ],
)
def test_a_wrong_field_is_named_with_its_file(verified: Path, tmp_path: Path, key: str, edit) -> None:  # type: ignore[no-untyped-def]
    dst = _copy_with(verified, tmp_path, edit)
    with pytest.raises(ReportError) as raised:
        read_report(dst)
    message = str(raised.value)
    assert f"'{key}'" in message and str(dst / REPORT_NAME) in message and "\n" not in message


def test_verify_refuses_an_invalid_report_rather_than_skip_its_checks(verified: Path, tmp_path: Path) -> None:
    dst = _copy_with(verified, tmp_path, lambda data: data.update(files=["model.safetensors"]))
    result = run_cli("verify", dst)
    assert result.exit_code == EXIT_BAD_INPUT and "'files' must be an object of strings" in result.stderr


def test_no_report_reads_as_none(tmp_path: Path) -> None:
    assert read_report(tmp_path) is None and read_report(tmp_path / "absent") is None
    (tmp_path / REPORT_NAME).write_text("{not json")
    with pytest.raises(ReportError, match="not JSON"):
        read_report(tmp_path)


def test_a_recorded_pass_needs_the_report_and_the_verification_file_to_agree(verified: Path, tmp_path: Path) -> None:
    assert recorded_verdict(verified) == "passed"
    failed = {"ok": False, "verdict": "failed"}
    dst = _copy_with(verified, tmp_path, lambda data: data.update(verification=failed))
    assert recorded_verdict(dst) == "failed"  # eaglequant_verify.json alone says passed
    (dst / REPORT_NAME).unlink()
    assert recorded_verdict(dst) is None  # nothing ties the files to the verification
