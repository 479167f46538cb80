"""The destination's record of its uploads, read typed: what it records, and what it ignores."""

from __future__ import annotations

import json
from pathlib import Path

from eaglequant.batch.uploads import UPLOADS_RECORD, Upload, read_uploads, record_upload


def test_an_upload_recorded_is_read_back_beside_the_others(tmp_path: Path) -> None:
    assert read_uploads(tmp_path) == {}  # no record yet
    first = Upload("k1", "https://hub/org/a/commit/1", "1")
    record_upload(tmp_path, "org/a@main", first)
    record_upload(tmp_path, "org/b@v2", Upload("k2", None, None))
    assert read_uploads(tmp_path) == {"org/a@main": first, "org/b@v2": Upload("k2", None, None)}
    record_upload(tmp_path, "org/a@main", Upload("k3", None, None))  # the same target again: replaced
    assert read_uploads(tmp_path)["org/a@main"].manifest_key == "k3"


def test_entries_that_are_not_uploads_record_nothing(tmp_path: Path) -> None:
    path = tmp_path / UPLOADS_RECORD
    path.parent.mkdir()
    path.write_text(
        json.dumps({"org/a@main": {"manifest_key": "k", "commit_url": 3}, "org/b@main": ["k"], "org/c@main": {}}),
        encoding="utf-8",
    )
    assert read_uploads(tmp_path) == {"org/a@main": Upload("k", None, None)}
    record_upload(tmp_path, "org/d@main", Upload("k4", None, None))  # what it cannot read, it leaves as it was
    assert json.loads(path.read_text(encoding="utf-8"))["org/b@main"] == ["k"]
    path.write_text("[1, 2]", encoding="utf-8")
    assert read_uploads(tmp_path) == {}
    path.write_text("{not json", encoding="utf-8")
    assert read_uploads(tmp_path) == {}
