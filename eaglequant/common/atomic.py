"""Writing a file or a directory whole or not at all: the new content goes to a sibling ``.NAME.partial``, moved over
``NAME`` in one rename once it is complete, and removed if writing it fails. A reader (or a later run) sees the old
content or the new, never a part. Every file eaglequant replaces in place goes through here; an output directory is
committed by :mod:`eaglequant.checkpoint.destination`, which keeps the one it replaces until the new one is in."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replaced_whole(path: Path, *, private: bool = False) -> Iterator[Path]:
    """The partial path to write ``path``'s new content to (a file, or a directory the caller makes); it replaces
    ``path`` when the block ends, and is removed when the block raises. A directory may only take the place of
    nothing: an existing ``path`` directory is the caller's to remove. ``private``: a partial of this process and
    thread's own, where several may write ``path`` at once (the last one in wins, each whole)."""
    owner = f".{os.getpid()}.{threading.get_ident()}" if private else ""
    partial = path.with_name(f".{path.name}{owner}.partial")
    _remove(partial)
    try:
        yield partial
        os.replace(partial, path)
    except BaseException:
        _remove(partial)
        raise


def write_text_whole(path: Path, text: str, *, private: bool = False) -> None:
    """``text`` (UTF-8) as ``path``, whole or not at all (``private``: see :func:`replaced_whole`)."""
    with replaced_whole(path, private=private) as partial:
        partial.write_text(text, encoding="utf-8")


def write_json(path: Path, content: Any) -> None:
    """``content`` as indented JSON at ``path``, whole or not at all."""
    write_text_whole(path, json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
