"""Where a conversion's output goes: DST checked against SRC and against what it holds, and the staged directory
that becomes DST (or DST.verify-failed) in one rename, or disappears."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eaglequant.common.errors import OutputError, switch, words

# The conversion report: its presence marks a directory eaglequant wrote (and may replace).
REPORT_NAME = "eaglequant_report.json"
TMP_MARKER = ".eaglequant-tmp-"


def check_destination(
    src: Path, dst: Path, overwrite: bool, overwrite_any: bool = False, marker: str = REPORT_NAME
) -> None:
    """Refuse a DST that overlaps SRC, or that exists: ``overwrite`` replaces only a directory the same eaglequant
    command wrote (it has that command's record, ``marker``: a conversion's report), ``overwrite_any`` any
    directory."""
    src_real, dst_real = src.resolve(), dst.resolve()
    if dst_real == src_real or src_real in dst_real.parents:
        raise OutputError(f"{dst}: the destination is inside the source checkpoint {src}", hint="choose another DST")
    if dst_real in src_real.parents:
        raise OutputError(f"{dst}: the destination contains the source checkpoint {src}", hint="choose another DST")
    if not dst.exists():
        return
    if not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a directory", hint="move it away, or choose another DST")
    if overwrite_any:
        return
    if not overwrite:
        raise OutputError(
            f"{dst}: already exists", hint=words("pass ", switch("overwrite"), " to replace it, or choose another DST")
        )
    if not (dst / marker).is_file():
        raise OutputError(
            words(
                f"{dst}: exists and was not written by eaglequant (no {marker}), so ",
                switch("overwrite"),
                " leaves it alone",
            ),
            hint=words("choose another DST, or pass ", switch("overwrite_any"), " to delete what it holds"),
        )


def remove_stale_temporaries(dst: Path) -> list[Path]:
    """Remove temporary directories that an interrupted run left beside ``dst`` (their owner is gone)."""
    removed: list[Path] = []
    parent = dst.parent if dst.parent.exists() else None
    if parent is None:
        return removed
    for candidate in parent.glob(f".{dst.name}{TMP_MARKER}*"):
        pid_text = candidate.name.rsplit("-", 2)[-2] if candidate.name.count("-") >= 2 else ""
        if pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(candidate, ignore_errors=True)
        removed.append(candidate)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StagedDirectory:
    """A temporary directory beside ``dst`` that becomes a destination in one rename when committed."""

    def __init__(self, dst: Path) -> None:
        self.dst = dst
        self.path = dst.parent / f".{dst.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
        self.committed_to: Path | None = None

    def commit(self, destination: Path, overwrite: bool) -> None:
        """Everything on disk, then the directory at ``destination``: ``dst`` (replaced when it exists only with
        ``overwrite``), or another path beside it (replacing only what eaglequant wrote there), ``dst`` then
        left as it was."""
        _fsync_tree(self.path)  # every file and directory on disk before the rename makes it visible
        if destination != self.dst:
            _replace_diverted(self.path, destination)
        elif destination.exists():
            if not overwrite:
                replace = words("pass ", switch("overwrite"), " to replace it")
                raise OutputError(f"{destination}: appeared while converting", hint=replace)
            trash = destination.parent / f".{destination.name}{TMP_MARKER}{os.getpid()}-old"
            destination.rename(trash)
            self.path.rename(destination)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            self.path.rename(destination)
        _fsync_dir(destination.parent)
        self.committed_to = destination


@contextmanager
def staged_directory(dst: Path) -> Iterator[StagedDirectory]:
    """A :class:`StagedDirectory` for ``dst``. Unless the block commits it, and on any exception (including
    KeyboardInterrupt), the temporary directory is removed and ``dst`` is left exactly as it was."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(dst)
    stage = StagedDirectory(dst)
    try:
        stage.path.mkdir()
    except OSError as exc:
        raise OutputError(f"{dst.parent}: cannot create the output directory ({exc.strerror})") from exc
    try:
        yield stage
    finally:
        if stage.committed_to is None:
            shutil.rmtree(stage.path, ignore_errors=True)


def _replace_diverted(tmp: Path, target: Path) -> None:
    """Put ``tmp`` at ``target``, replacing what an earlier run diverted there (and nothing else)."""
    if target.exists():
        if not (target / REPORT_NAME).is_file():
            raise OutputError(f"{target}: exists and was not written by eaglequant", hint="move it away")
        shutil.rmtree(target)
    tmp.rename(target)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):  # files before the directories holding them
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
