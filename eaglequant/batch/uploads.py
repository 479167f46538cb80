"""The destination's own record of its uploads (``.eaglequant/uploads.json``, never uploaded, not in the report):
for each ``repo_id@revision``, the manifest key of what went there and the commit it made. Offline, ``batch``
takes it as the word that a job's upload is done."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.atomic import write_json
from eaglequant.common.json_fields import JsonRecord

UPLOADS_RECORD = Path(".eaglequant") / "uploads.json"


@dataclass(frozen=True)
class Upload(JsonRecord):
    manifest_key: str
    commit_url: str | None
    commit_oid: str | None

    @classmethod
    def from_entry(cls, value: object) -> Upload | None:
        """None for an entry that is not one (hand-edited, or from another version): it records nothing."""
        if not isinstance(value, dict) or not isinstance(value.get("manifest_key"), str):
            return None
        url, oid = value.get("commit_url"), value.get("commit_oid")
        return cls(value["manifest_key"], url if isinstance(url, str) else None, oid if isinstance(oid, str) else None)


def read_uploads(dst: Path) -> dict[str, Upload]:
    """``repo_id@revision`` -> what was uploaded there from ``dst``; empty when there is no readable record."""
    return {target: upload for target, entry in _entries(dst).items() if (upload := Upload.from_entry(entry))}


def record_upload(dst: Path, target: str, upload: Upload) -> None:
    """Add (or replace) ``target``'s entry in ``dst``'s record; the other entries are kept as they are."""
    entries = _entries(dst)
    entries[target] = upload.to_json()
    path = dst / UPLOADS_RECORD
    path.parent.mkdir(exist_ok=True)
    write_json(path, entries)


def _entries(dst: Path) -> dict[str, Any]:
    try:
        value = json.loads((dst / UPLOADS_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
