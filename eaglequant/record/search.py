"""What ``search`` records in the draft it chose (``eaglequant_search.json``), read typed for the model card."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglequant.common.errors import CheckpointError
from eaglequant.common.json_fields import JsonObject, read_json_file

SEARCH_RECORD = "eaglequant_search.json"
_REPAIR = "it was changed after the search or is damaged: run eaglequant search again"


class SearchRecordError(CheckpointError):
    """A search record that cannot be read."""


@dataclass(frozen=True)
class SearchRow:
    candidate: str
    bytes_per_round: int
    difference: tuple[float | None, float | None, float | None] | None  # predicted (value, low, high); None: not run
    within: bool | None


@dataclass(frozen=True)
class SearchRecord:
    budget_tokens: float
    rule: str
    relative: bool
    budget_value: float
    source_bytes_per_round: int
    chosen: str | None
    stopped: str
    frontier: tuple[SearchRow, ...]

    @classmethod
    def from_json(cls, data: object, where: str) -> SearchRecord:
        top = JsonObject(data, where, SearchRecordError, _REPAIR)
        budget = top.child("budget")
        chosen = top.get("chosen")
        return cls(
            budget.number("tokens"),
            budget.text("rule"),
            budget.boolean("relative"),
            budget.number("value"),
            top.integer("source_bytes_per_round"),
            None if chosen is None else top.child("chosen").text("candidate"),
            top.text("stopped"),
            tuple(_row(row) for row in top.children("frontier")),
        )


def _row(row: JsonObject) -> SearchRow:
    difference = None
    if row.get("predicted") is not None:
        diff = row.child("predicted").child("difference")

        def bound(name: str) -> float | None:
            return None if diff.get(name) is None else diff.number(name)

        difference = (bound("value"), bound("low"), bound("high"))
    return SearchRow(row.text("candidate"), row.integer("bytes_per_round"), difference, row.get("within_budget"))


def read_search(dst: Path) -> SearchRecord | None:
    """The search recorded in ``dst``; None when ``dst`` was not chosen by a search."""
    path = dst / SEARCH_RECORD
    data = read_json_file(path, SearchRecordError, _REPAIR)
    return None if data is None else SearchRecord.from_json(data, str(path))
