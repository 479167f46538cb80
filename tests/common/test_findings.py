"""A finding reads as its sentence wherever text goes, and keeps its code and subject wherever a value goes."""

from __future__ import annotations

import copy
import json
import pickle

from eaglequant.common.findings import Finding, codes, find


def _finding() -> Finding:
    return Finding("sha256-differs", "config.json", "config.json: SHA-256 differs")


def test_a_finding_is_its_text_in_json_joins_and_comparisons() -> None:
    finding = _finding()
    assert json.dumps({"problems": [finding]}) == '{"problems": ["config.json: SHA-256 differs"]}'
    assert "; ".join([finding, "other"]) == "config.json: SHA-256 differs; other"
    assert f"{finding}" == finding == "config.json: SHA-256 differs"
    assert finding in {"config.json: SHA-256 differs"}


def test_copies_and_pickles_keep_the_code_and_subject() -> None:
    for again in (copy.copy(_finding()), copy.deepcopy(_finding()), pickle.loads(pickle.dumps(_finding()))):
        assert isinstance(again, Finding)
        assert (again.code, again.subject, str(again)) == ("sha256-differs", "config.json", _finding())


def test_prefixed_keeps_the_code_and_subject() -> None:
    prefixed = _finding().prefixed("vLLM: ")
    assert (prefixed.code, prefixed.subject, str(prefixed)) == (
        "sha256-differs",
        "config.json",
        "vLLM: config.json: SHA-256 differs",
    )


def test_codes_and_find_read_the_codes_in_order() -> None:
    missing = Finding("listed-but-missing", "a.safetensors", "a.safetensors: listed but missing")
    findings = [_finding(), missing, "a plain sentence"]
    assert codes(findings) == ["sha256-differs", "listed-but-missing", ""]
    assert find(findings, "listed-but-missing") is missing
    assert find(findings, "never-loaded") is None
