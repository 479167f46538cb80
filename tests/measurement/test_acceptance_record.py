"""The typed reading of eaglequant_accept.json, and the card's acceptance section drawn from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eaglequant.measurement.record import ACCEPT_NAME, AcceptanceRecord, AcceptanceRecordError, read_acceptance
from eaglequant.publish.card import _acceptance


def _interval(value: float | None, low: float | None, high: float | None) -> dict[str, float | None]:
    return {"value": value, "low": low, "high": high}


def _draft(served_as: str, length: float, difference: dict[str, Any] | None, near_ties: int = 0) -> dict[str, Any]:
    return {
        "label": served_as,
        "served_as": served_as,
        "lossless": {
            "equal": 22 - near_ties,
            "near_ties": near_ties,
            "prompts": 22,
            "ok": True,
            "near_tie_nats": 0.125,
        },
        "modes": {
            "greedy": {
                "prompts": 22,
                "acceptance_length": _interval(length, length - 0.1, length + 0.1),
                "per_position": [_interval(0.7, 0.6, 0.8), _interval(0.45, None, None)],
                "difference": difference,
            }
        },
    }


RECORD = {
    "engine": "vllm",
    "version": "0.32.0",
    "settings": {
        "target": "t",
        "prompts": 22,
        "prompts_from": "bundled",
        "num_speculative_tokens": 3,
        "max_tokens": 96,
    },
    "source": _draft("source", 2.481, None),
    "quantized": [_draft("dequantized", 2.5, _interval(0.019, -0.02, 0.058), near_ties=2)],
    "notes": ["a note"],
    "ok": True,
    "problems": [],
}


def test_the_record_reads_typed_and_the_card_shows_it(tmp_path: Path) -> None:
    (tmp_path / ACCEPT_NAME).write_text(json.dumps(RECORD))
    record = read_acceptance(tmp_path)
    assert record is not None and record.quantized[0].modes["greedy"].difference is not None
    section = _acceptance(record)
    assert "Measured with vLLM 0.32.0's own EAGLE-3 speculative decoding" in section
    assert "| source (BF16) | greedy | 2.481 [2.381, 2.581] | 0.70 / 0.45 |  |" in section
    assert (
        "| this checkpoint (dequantized) | greedy | 2.500 [2.400, 2.600] | 0.70 / 0.45 | +0.019 [-0.020, +0.058] |"
        in section
    )
    assert "near-tie of the target's own choice (top two within 0.125 nats) on 2." in section
    assert "Note: a note" in section and read_acceptance(tmp_path / "absent") is None


def test_a_wrong_record_is_one_line_naming_the_key() -> None:
    broken = {**RECORD, "settings": {**RECORD["settings"], "max_tokens": "96"}}  # type: ignore[dict-item]
    with pytest.raises(AcceptanceRecordError, match=r"'settings\.max_tokens' must be an integer"):
        AcceptanceRecord.from_json(broken)


def test_k_reads_by_its_one_name_and_by_the_name_older_records_wrote() -> None:
    """Issue 54, item 4: k is ``draft_tokens`` in the CLI, JSON and code; a record written before (vLLM's
    ``num_speculative_tokens``) still reads."""
    settings = {k: v for k, v in RECORD["settings"].items() if k != "num_speculative_tokens"}  # type: ignore[attr-defined]
    current = AcceptanceRecord.from_json({**RECORD, "settings": {**settings, "draft_tokens": 5}})
    assert current.settings.draft_tokens == 5 and AcceptanceRecord.from_json(RECORD).settings.draft_tokens == 3


def test_an_inconclusive_budget_is_not_shown_as_a_problem() -> None:
    unsettled = {"code": "acceptance-inconclusive", "subject": "q", "message": "about 40 prompts more would tell"}
    defect = {"code": "not-lossless", "subject": "q", "message": "greedy output differs on 2 of 22 prompts"}
    section = _acceptance(AcceptanceRecord.from_json({**RECORD, "ok": False, "problems": [unsettled, defect]}))
    assert "**Inconclusive**: about 40 prompts more would tell" in section
    assert "**Problem**: greedy output differs on 2 of 22 prompts" in section
    assert "**Problem**: about 40" not in section
