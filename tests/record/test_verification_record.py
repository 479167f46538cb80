"""The typed reading of eaglequant_verify.json, and the verdict's exit codes, in one place."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eaglequant.common.errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE, EXIT_NOT_VERIFIED
from eaglequant.record.verification import (
    VERIFY_NAME,
    Verdict,
    VerificationRecord,
    VerificationRecordError,
    read_verification,
)

RECORD = {
    "ok": True,
    "verdict": "passed",
    "problems": [],
    "thresholds": {"min_sqnr_db": 17.0, "min_cosine": 0.99},
    "parity_rows": 64,
    "layers": [{"module": "midlayer.mlp.down_proj", "backend": "torch", "sqnr_db": "inf", "cosine": 1.0}],
    "fidelity": {"tokens": 256, "top1_agreement": 1.0, "mean_kl": 0.0, "mean_tv": 0.0, "hidden_cosine": 1.0},
    "notes": [],
}


def test_every_verdict_has_its_exit_code_and_reads_as_its_text() -> None:
    assert {v: v.exit_code for v in Verdict} == {
        Verdict.PASSED: 0,
        Verdict.FAILED: EXIT_CHECK_FAILED,
        Verdict.NOT_VERIFIED: EXIT_NOT_VERIFIED,
        Verdict.INCONCLUSIVE: EXIT_INCONCLUSIVE,
    }
    assert json.dumps(Verdict.NOT_VERIFIED) == '"not verified numerically"'
    assert f"{Verdict.FAILED}" == str(Verdict.FAILED) == "failed" and Verdict.FAILED == "failed"


def test_a_record_reads_typed_with_the_defaults_of_older_files(tmp_path: Path) -> None:
    (tmp_path / VERIFY_NAME).write_text(json.dumps(RECORD))
    record = read_verification(tmp_path)
    assert record is not None and record.passed and record.verdict is Verdict.PASSED
    assert math.isinf(record.layers[0].sqnr_db) and record.thresholds.min_sqnr_db == 17.0
    assert record.fidelity is not None and record.fidelity.inputs == "synthetic"  # written before inputs were
    older = {key: value for key, value in RECORD.items() if key != "verdict"}
    assert VerificationRecord.from_json(older).verdict is Verdict.PASSED
    assert not VerificationRecord.from_json({**RECORD, "layers": []}).passed  # parity never ran
    assert read_verification(tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"verdict": "maybe"}, "'verdict' must be one of 'passed', 'failed', 'not verified numerically'"),
        ({"ok": "yes"}, "'ok' must be true or false"),
        ({"layers": [{"module": "m", "backend": "b", "sqnr_db": "lots", "cosine": 1.0}]}, "'layers[0].sqnr_db'"),
    ],
)
def test_a_wrong_record_is_one_line_naming_the_key(change: dict[str, object], said: str) -> None:
    with pytest.raises(VerificationRecordError, match=said.replace("[", r"\[").replace("]", r"\]")):
        VerificationRecord.from_json({**RECORD, **change})


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / VERIFY_NAME).write_text("{not json")
    with pytest.raises(VerificationRecordError, match="not JSON"):
        read_verification(tmp_path)
