"""A finding is a value: its code (one of the registry's), subject and message; it prints as its message, and JSON
writes and reads all three."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from eaglequant.common.finding_codes import FINDING_CODES
from eaglequant.common.findings import Finding, codes, find, messages


def _finding() -> Finding:
    return Finding("sha256-differs", "config.json", "config.json: SHA-256 differs")


def test_a_finding_is_a_value_not_a_string() -> None:
    finding = _finding()
    assert not isinstance(finding, str) and str(finding) == f"{finding}" == "config.json: SHA-256 differs"
    assert finding == _finding() and hash(finding) == hash(_finding())
    assert finding != Finding("listed-but-missing", "config.json", "config.json: SHA-256 differs")  # the code counts
    assert finding != "config.json: SHA-256 differs"


def test_json_writes_the_code_and_reads_it_back() -> None:
    written = json.loads(json.dumps(_finding().to_json()))
    assert written == {"code": "sha256-differs", "subject": "config.json", "message": "config.json: SHA-256 differs"}
    assert Finding.from_json(written) == _finding()


def test_a_bare_string_reads_as_an_unrecorded_finding() -> None:
    old = Finding.from_json("a note from an older record")
    assert (old.code, old.subject, old.message) == ("unrecorded", "", "a note from an older record")
    with pytest.raises(ValueError):
        Finding.from_json({"code": "sha256-differs"})


def test_an_unregistered_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unregistered finding code"):
        Finding("no-such-code", "", "text")
    assert all(code == code.lower() and " " not in code and FINDING_CODES[code] for code in FINDING_CODES)


def test_copies_and_pickles_keep_the_code_and_subject() -> None:
    for again in (copy.copy(_finding()), copy.deepcopy(_finding()), pickle.loads(pickle.dumps(_finding()))):
        assert again == _finding()


def test_prefixed_keeps_the_code_and_subject() -> None:
    prefixed = _finding().prefixed("vLLM: ")
    assert (prefixed.code, prefixed.subject, str(prefixed)) == (
        "sha256-differs",
        "config.json",
        "vLLM: config.json: SHA-256 differs",
    )


def test_codes_find_and_messages_read_in_order() -> None:
    missing = Finding("listed-but-missing", "a.safetensors", "a.safetensors: listed but missing")
    findings = [_finding(), missing]
    assert codes(findings) == ["sha256-differs", "listed-but-missing"]
    assert messages(findings) == ["config.json: SHA-256 differs", "a.safetensors: listed but missing"]
    assert find(findings, "listed-but-missing") is missing
    assert find(findings, "never-loaded") is None
