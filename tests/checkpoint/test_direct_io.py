"""Kept tensors copied past the page cache: the same file and digest as the kernel's copy, whatever the ranges,
their order and their alignment, and the page cache again wherever the filesystem refuses direct writes."""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglequant.checkpoint import direct_io, writer
from eaglequant.checkpoint.direct_io import ALIGN, DirectWriter, aligned_interior
from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec
from eaglequant.common.errors import CheckpointError, OutputError
from tests.conftest import vendor_required


@given(st.integers(0, 10**12), st.integers(0, 10**6))
def test_the_aligned_interior_is_the_largest_aligned_range_inside(start: int, length: int) -> None:
    end = start + length
    first, stop = aligned_interior(start, end)
    assert first % ALIGN == 0 and stop % ALIGN == 0
    assert start <= first < start + ALIGN and end - ALIGN < stop <= end
    # Empty exactly when no aligned block fits.
    assert (stop - first >= ALIGN) == any(b % ALIGN == 0 and b + ALIGN <= end for b in range(start, start + ALIGN))


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct copies of anything a block or longer, a few blocks at a time."""
    monkeypatch.setattr(writer, "MIN_DIRECT_BYTES", ALIGN)
    monkeypatch.setattr(direct_io, "CHUNK_BYTES", 3 * ALIGN)


def _require_direct_io(path: Path) -> None:
    probe = path / "probe"
    probe.write_bytes(b"")
    direct = DirectWriter.open(probe)
    if direct is None:
        if vendor_required():  # CI's filesystem takes O_DIRECT: the path under test must run there
            raise AssertionError(f"{path}: O_DIRECT refused")
        pytest.skip("this filesystem refuses O_DIRECT")
    direct.close()
    probe.unlink()


def _copy_shard(tmp_path: Path, seed: int, name: str = "out.safetensors") -> tuple[SafetensorsShard, bytes, str]:
    """Three tensors of awkward sizes copied from a source file in shuffled pieces; the expected file bytes and the
    digest the shard gave."""
    rng = random.Random(seed)
    sizes = [5 * ALIGN + 7, 3, 11 * ALIGN + ALIGN // 2 + 1]
    source = tmp_path / f"source-{seed}"
    lead = rng.randrange(1, ALIGN)  # tensors do not start on a block of the source either
    data = rng.randbytes(lead + sum(sizes))
    source.write_bytes(data)
    specs = [TensorSpec(f"t{i}", "U8", (size,)) for i, size in enumerate(sizes)]
    shard = SafetensorsShard(tmp_path / name, specs, metadata={"format": "pt"})
    pieces = []
    offset = lead
    for spec in specs:
        cuts = sorted({0, spec.nbytes, *rng.sample(range(1, spec.nbytes), min(3, spec.nbytes - 1))})
        pieces += [(spec.name, a, offset + a, b - a) for a, b in itertools.pairwise(cuts)]
        offset += spec.nbytes
    rng.shuffle(pieces)
    fd = os.open(source, os.O_RDONLY)
    try:
        for tensor, start, src_offset, nbytes in pieces:
            shard.copy_from(tensor, start, fd, src_offset, nbytes)
        digest = shard.close()
    finally:
        os.close(fd)
    header = writer.safetensors_header(specs, {"format": "pt"})
    return shard, header + data[lead:], digest


@pytest.mark.parametrize("seed", range(4))
def test_direct_copies_give_the_bytes_and_digest_of_the_source(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    _require_direct_io(tmp_path)
    copied = []
    real_copy = DirectWriter.copy

    def counting_copy(self: DirectWriter, src_fd: int, src_offset: int, out: int, nbytes: int) -> bool:
        done = real_copy(self, src_fd, src_offset, out, nbytes)
        copied.append(nbytes if done else 0)
        return done

    monkeypatch.setattr(DirectWriter, "copy", counting_copy)
    shard, expected, digest = _copy_shard(tmp_path, seed)
    assert shard.path.read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()
    assert sum(copied) >= 8 * ALIGN  # most of the bytes went past the page cache


def test_a_refused_direct_write_turns_direct_writing_off_and_loses_nothing(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require_direct_io(tmp_path)
    real_pwrite = os.pwrite
    refused = []

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fd in direct_fds and not refused:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    direct_fds: set[int] = set()
    real_open = DirectWriter.open.__func__  # type: ignore[attr-defined]

    def opening(cls: type[DirectWriter], path: Path) -> DirectWriter | None:
        direct = real_open(cls, path)
        if direct is not None:
            direct_fds.add(direct.fd)
        return direct

    monkeypatch.setattr(DirectWriter, "open", classmethod(opening))
    monkeypatch.setattr(direct_io.os, "pwrite", pwrite)
    shard, expected, digest = _copy_shard(tmp_path, seed=7)
    assert refused, "no direct write was attempted"
    assert shard._direct is not None and not shard._direct.enabled
    assert shard.path.read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()


def test_files_off_a_local_block_device_keep_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_direct_io(tmp_path)
    (tmp_path / "f").write_bytes(b"")
    assert DirectWriter.open(tmp_path / "f") is not None
    monkeypatch.setattr(direct_io.os, "major", lambda device: 0)  # as NFS, FUSE, tmpfs or btrfs report
    assert DirectWriter.open(tmp_path / "f") is None


def test_without_direct_io_the_kernel_copies_the_same_bytes(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EAGLEQUANT_NO_DIRECT_IO", "1")
    shard, expected, digest = _copy_shard(tmp_path, seed=3)
    assert shard._direct is None
    assert shard.path.read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()


def test_a_source_that_ends_early_is_an_output_error_naming_the_tensor(tmp_path: Path, small_chunks: None) -> None:
    _require_direct_io(tmp_path)
    source = tmp_path / "short"
    source.write_bytes(bytes(4 * ALIGN))
    shard = SafetensorsShard(tmp_path / "out.safetensors", [TensorSpec("big", "U8", (64 * ALIGN,))])
    fd = os.open(source, os.O_RDONLY)
    try:
        with pytest.raises(OutputError, match="source ended while copying 'big'"):
            shard.copy_from("big", 0, fd, 0, 64 * ALIGN)
    finally:
        shard.discard()
        os.close(fd)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(0, 3 * ALIGN))
def test_direct_copy_refuses_unaligned_ranges(offset: int, nbytes: int) -> None:
    writer_ = DirectWriter(-1)
    if offset % ALIGN or nbytes % ALIGN:
        with pytest.raises(ValueError, match="aligned"):
            writer_.copy(-1, 0, offset, nbytes)


def test_direct_writes_keep_whole_filesystem_blocks_larger_than_a_page() -> None:
    assert direct_io._alignment(512) == ALIGN
    assert direct_io._alignment(ALIGN) == ALIGN
    assert direct_io._alignment(16 * ALIGN) == 16 * ALIGN  # XFS with 64 KiB blocks on 4 KiB pages
    assert direct_io._alignment(3 * ALIGN) == ALIGN  # not a power of two: not a block size to trust
    assert direct_io._alignment(2 * direct_io.CHUNK_BYTES) == ALIGN  # a chunk must hold whole blocks
    writer_ = DirectWriter(-1, 16 * ALIGN)
    assert writer_.interior(1, 40 * ALIGN) == (16 * ALIGN, 32 * ALIGN)


def test_a_source_read_failure_blames_the_source_not_the_output(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require_direct_io(tmp_path)
    source = tmp_path / "source"
    source.write_bytes(bytes(8 * ALIGN))
    shard = SafetensorsShard(tmp_path / "out.safetensors", [TensorSpec("big", "U8", (8 * ALIGN,))])

    def failing_read(fd: int, buffers: list[memoryview], offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(direct_io.os, "preadv", failing_read)
    fd = os.open(source, os.O_RDONLY)
    try:
        with pytest.raises(CheckpointError, match=r"cannot read the source bytes of 'big' \(Input/output error\)"):
            shard.copy_from("big", 0, fd, 0, 8 * ALIGN)
    finally:
        shard.discard()
        os.close(fd)
