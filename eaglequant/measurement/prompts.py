"""Prompts for acceptance runs: a file of the user's, or the held-out prompts bundled with the trained pair."""

from __future__ import annotations

import json
from pathlib import Path

from eaglequant.common.errors import InputError, placeholder, words

BUNDLED_NAME = "prompts.jsonl"


def bundled_prompts_path() -> Path:
    """The held-out prompts of the bundled trained pair (documents neither its target nor its draft saw)."""
    installed = Path(__file__).resolve().parent.parent / "_bundled" / BUNDLED_NAME
    if installed.is_file():
        return installed
    return Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair" / BUNDLED_NAME


def bundled_prompts_note(target: str | Path) -> str | None:
    """What to tell a user who gave no prompts for ``target``: that the bundled held-out prompts were written for the
    bundled trained pair (None when ``target`` is that pair's target), and how to give their own."""
    bundled = bundled_prompts_path()
    given = Path(target)
    if given.exists() and given.resolve().parent == bundled.resolve().parent:
        return None
    return (
        f"no --prompts: using the bundled held-out prompts ({bundled.name}, prose written for the bundled trained "
        f"pair), not prompts of {target}'s own traffic; acceptance depends on the prompts: give --prompts FILE"
    )


def read_prompts(path: Path | None, limit: int | None = None, parameter: str = "prompts") -> tuple[list[str], str]:
    """Prompts from ``path`` (JSON lines with a "prompt" string, or plain text with one prompt a line), and
    where they came from. None: the bundled held-out prompts."""
    chosen = path or bundled_prompts_path()
    flag = placeholder(parameter, str(chosen))
    where = str(chosen) if path is not None else "bundled held-out prompts"
    if not chosen.is_file():
        raise InputError(words(flag, ": no such file"), hint='give a .jsonl file with one {"prompt": ...} per line')
    prompts: list[str] = []
    for number, line in enumerate(chosen.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if chosen.suffix == ".jsonl":
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    words(flag, f":{number}: not JSON ({exc.msg})"), hint="one JSON object a line"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
                raise InputError(words(flag, f':{number}: no "prompt" string'), hint='write {"prompt": "..."}')
            prompts.append(record["prompt"])
        else:
            prompts.append(line)
    if not prompts:
        raise InputError(words(flag, ": holds no prompt"), hint="one prompt a line")
    return prompts[:limit] if limit else prompts, where
