"""eaglequant_search.json is written and read by one type: what a search writes reads back equal, and a damaged
record is refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglequant.record.search import SEARCH_RECORD, SearchRecordError, read_search
from tests.project.test_record_json import _search


def test_a_search_record_reads_back_equal_to_what_was_written(tmp_path: Path) -> None:
    for result in (_search(), _replace_none_chosen()):
        record = result.record()
        (tmp_path / SEARCH_RECORD).write_text(json.dumps(record.to_json()))
        assert read_search(tmp_path) == record


def test_the_card_reads_the_chosen_rows_prediction_from_the_record() -> None:
    record = _search().record()
    assert record.chosen is not None and record.chosen.difference == (-0.01235, None, None)
    assert [row.difference is None for row in record.frontier] == [False, True, True]


def test_a_damaged_search_record_names_the_key(tmp_path: Path) -> None:
    data = _search().record().to_json()
    data["frontier"][0]["bytes_per_round"] = "many"
    (tmp_path / SEARCH_RECORD).write_text(json.dumps(data))
    with pytest.raises(SearchRecordError, match=r"frontier\[0\]\.bytes_per_round"):
        read_search(tmp_path)


def _replace_none_chosen():
    from dataclasses import replace

    return replace(_search(), chosen=None, destination=None, pruned_source=None)
