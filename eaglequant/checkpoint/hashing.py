"""SHA-256 of checkpoint files without copying their bytes through Python buffers.

Files are hashed through read-only memory maps, one window at a time: ``hashlib`` reads the page cache
directly and releases the GIL, and each window is unmapped after use so resident memory stays at one
window whatever the file size. :class:`FollowingHasher` hashes a file while it is being written, in
byte order, as the ranges before its cursor are reported complete (writes may finish in any order).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from eaglequant.common.atomic import write_text_whole

WINDOW_BYTES = 16 * 1024 * 1024  # a multiple of mmap.ALLOCATIONGRANULARITY
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
Source = tuple[int, int]  # an open file descriptor and a byte offset in it


def hash_range(fd: int, digest: hashlib._Hash, start: int, end: int) -> None:
    """Feed bytes ``[start, end)`` of the open file ``fd`` to ``digest``."""
    while start < end:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        length = min(end, base + WINDOW_BYTES) - base
        window = mmap.mmap(fd, length, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ, offset=base)
        with window, memoryview(window) as view:
            digest.update(view[start - base : length])
        start = base + length


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        hash_range(fd, digest, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return digest.hexdigest()


class FollowingHasher:
    """Hashes a file of known final size in a background thread, following its writers.

    Writers call :meth:`completed` for every byte range they finished; the thread hashes the file from
    its start as far as the completed ranges reach, so hashing overlaps writing and never rereads a
    range from disk (the pages are still cached). A range copied verbatim from another file is hashed from
    that file's bytes (still cached: they were just read), since it may have been written past the page cache.
    :meth:`hexdigest` waits for the end of the file.
    """

    def __init__(self, path: Path, size: int, after_hashing: Callable[[int, int], None] | None = None) -> None:
        """``after_hashing(start, end)``: called in the hashing thread with every range it has hashed."""
        self.size = size
        self._after_hashing = after_hashing
        self._digest = hashlib.sha256()
        self._fd = os.open(path, os.O_RDONLY)
        self._done: dict[int, tuple[int, Source | None]] = {}  # start -> end and source of ranges not yet hashed
        self._cursor = 0
        self._failed: BaseException | None = None
        self._abandoned = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"sha256 {path.name}", daemon=True)
        self._thread.start()

    def completed(self, start: int, end: int, source: Source | None = None) -> None:
        """Bytes ``[start, end)`` are written; ``source``: (descriptor, offset) of a file holding the same bytes,
        open until :meth:`hexdigest` or :meth:`abandon` returns."""
        if end > start:
            with self._cond:
                self._done[start] = (end, source)
                self._cond.notify()

    def _run(self) -> None:
        try:
            while self._cursor < self.size:
                with self._cond:
                    while self._cursor not in self._done and not self._abandoned:
                        self._cond.wait()
                    if self._abandoned:
                        return
                    end, source = self._done.pop(self._cursor)
                    while source is None and end in self._done and self._done[end][1] is None:
                        end = self._done.pop(end)[0]
                if source is None:
                    hash_range(self._fd, self._digest, self._cursor, end)
                else:
                    hash_range(source[0], self._digest, source[1], source[1] + end - self._cursor)
                if self._after_hashing is not None:
                    self._after_hashing(self._cursor, end)
                self._cursor = end
        except BaseException as exc:  # re-raised in the caller's thread by hexdigest()
            self._failed = exc
        finally:
            os.close(self._fd)

    def hexdigest(self) -> str:
        self._thread.join()
        if self._failed is not None:
            raise self._failed
        if self._cursor != self.size:
            raise RuntimeError(f"hashed {self._cursor} of {self.size} bytes")
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """Stop without a result (the file is being discarded)."""
        with self._cond:
            self._abandoned = True
            self._cond.notify()
        self._thread.join()


# A file is trusted to be unchanged when its identity and times are; one modified within this long of
# being hashed might change again within the filesystem's timestamp granularity, so it is not cached.
_RACY_NS = 2 * 10**9


def cache_dir() -> Path:
    """eaglequant's cache: $EAGLEQUANT_CACHE_DIR, else $XDG_CACHE_HOME/eaglequant, else ~/.cache/eaglequant."""
    explicit = os.environ.get("EAGLEQUANT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eaglequant"


def cached_file_sha256(path: Path) -> str:
    """:func:`file_sha256`, remembered by the file's identity (device, inode, size, mtime and ctime, as git's
    index does) so that converting one source with several schemes reads it once. ctime cannot be set
    by a user, so any change to the file makes a new entry."""
    started = time.time_ns()
    st = os.stat(path)
    identity = [os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry = cache_dir() / "sha256" / hashlib.sha256(json.dumps(identity).encode()).hexdigest()
    try:
        digest = entry.read_text(encoding="ascii").strip()
        if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            return digest
    except OSError:
        pass
    digest = file_sha256(path)
    if max(st.st_mtime_ns, st.st_ctime_ns) < started - _RACY_NS:
        _store(entry, digest)
    return digest


def _store(entry: Path, digest: str) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_text_whole(entry, digest + "\n", private=True)  # threads and processes may store one entry at once
    except OSError:
        pass  # a cache that cannot be written only costs time
