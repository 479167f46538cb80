"""File hashing: the following hasher (writes finishing in any order) and the stat-keyed digest cache."""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import threading
import time
from pathlib import Path

import pytest

from eaglequant.checkpoint import hashing
from eaglequant.checkpoint.hashing import FollowingHasher, cached_file_sha256, file_sha256
from eaglequant.checkpoint.writer import start_writeback


def test_file_sha256_across_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "WINDOW_BYTES", 1 << 16)  # many windows, one partial
    data = random.Random(0).randbytes(5 * (1 << 16) + 123)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert file_sha256(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("seed", range(5))
def test_following_hasher_in_any_completion_order(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "WINDOW_BYTES", 1 << 16)
    rng = random.Random(seed)
    data = rng.randbytes(300_000)
    cuts = sorted({0, len(data), *rng.sample(range(1, len(data)), 20)})
    ranges = list(itertools.pairwise(cuts))
    rng.shuffle(ranges)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, len(data))
    hashed: list[tuple[int, int]] = []
    hasher = FollowingHasher(path, len(data), lambda start, end: hashed.append((start, end)))
    for start, end in ranges:
        os.pwrite(fd, data[start:end], start)
        hasher.completed(start, end)
    assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    # Every range is handed on once hashed (the writer starts its writeback there), in file order, end to end.
    assert hashed[0][0] == 0 and hashed[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(hashed))
    start_writeback(fd, 0, len(data))  # advisory: it never fails, with or without the system call
    os.close(fd)


def test_following_hasher_abandoned_midway(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(1000))
    hasher = FollowingHasher(path, 1000)
    hasher.completed(0, 10)
    stopper = threading.Thread(target=hasher.abandon)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive()  # abandon returns although the rest never completes
    with pytest.raises(RuntimeError, match=r"hashed (0|10) of 1000 bytes"):  # as far as it got
        hasher.hexdigest()  # and no digest of a partial file is ever given


def _old(path: Path) -> None:
    """Make the file look written long ago (ctime cannot be set, so the cache's racy check is moved)."""
    past = time.time() - 3600
    os.utime(path, (past, past))


def test_digest_cache_hits_for_an_unchanged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLEQUANT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hashing, "_RACY_NS", -(10**12))  # ctime is now; pretend it is old enough
    path = tmp_path / "weights"
    path.write_bytes(b"abc" * 1000)
    _old(path)
    expected = hashlib.sha256(b"abc" * 1000).hexdigest()
    assert cached_file_sha256(path) == expected

    def no_read(_path: Path) -> str:
        raise AssertionError("read again")

    monkeypatch.setattr(hashing, "file_sha256", no_read)
    assert cached_file_sha256(path) == expected


def test_digest_cache_misses_after_any_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLEQUANT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hashing, "_RACY_NS", -(10**12))
    path = tmp_path / "weights"
    path.write_bytes(b"a" * 100)
    _old(path)
    cached_file_sha256(path)
    time.sleep(0.05)  # past the kernel's timestamp granularity (the racy window guards this in real use)
    with path.open("r+b") as handle:  # same size, mtime put back: only ctime tells
        handle.write(b"b")
    _old(path)
    assert cached_file_sha256(path) == hashlib.sha256(b"b" + b"a" * 99).hexdigest()


def test_recently_modified_files_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLEQUANT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "weights"
    path.write_bytes(b"fresh")
    cached_file_sha256(path)  # its ctime is within the racy window
    assert not (tmp_path / "cache" / "sha256").exists() or not any((tmp_path / "cache" / "sha256").iterdir())
