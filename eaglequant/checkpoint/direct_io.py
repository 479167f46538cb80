"""Copying kept tensors past the page cache.

Most of a head's bytes are tensors copied verbatim (embed_tokens, lm_head, fc). Through the page cache
(``copy_file_range``, ``write``) the kernel allocates, fills, dirties and later writes back every 4 KiB page, about
one core-second per 1.2 GB on ext4 here, which is what ``cp`` spends; read into an aligned buffer and written with
``O_DIRECT``, a copy costs one memory copy and the disk's DMA (5 GB: 4.3 s and 4.4 core-seconds with hashing,
against 6.0-7.9 s and 8.4-9.4 core-seconds through the page cache, measured side by side).

``O_DIRECT`` needs the file offset, length and buffer address aligned to the device's block; only the aligned
interior of a range is written this way, its ragged ends (shared with neighbouring tensors) go through the page
cache. Only files on a local block device (ext4, XFS) are written this way; elsewhere, on a system without
``O_DIRECT``, or after a write the filesystem rejects, the bytes go through the page cache: the same bytes either
way.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

from eaglequant.checkpoint.safetensors_file import read_exactly
from eaglequant.common.environment import env_true

ALIGN = max(4096, mmap.PAGESIZE)  # covers 512-byte and 4 KiB logical blocks, and whole pages of the cache
CHUNK_BYTES = 8 * 1024 * 1024  # one read and one write per chunk; a multiple of ALIGN
MIN_DIRECT_BYTES = 1024 * 1024  # below this the kernel's copy is as cheap
_REFUSED = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


class SourceReadError(OSError):
    """Reading the bytes to copy failed (the source's fault, not the output's)."""


def aligned_interior(start: int, end: int, align: int = ALIGN) -> tuple[int, int]:
    """The largest ``align``-aligned ``[a, b)`` inside ``[start, end)`` (empty: ``a >= b``)."""
    return -(-start // align) * align, end // align * align


_buffers = threading.local()  # one aligned buffer per copying thread, whatever the number of files it writes


def _buffer() -> mmap.mmap:
    buffer = getattr(_buffers, "buffer", None)
    if buffer is None or len(buffer) != CHUNK_BYTES:
        buffer = _buffers.buffer = mmap.mmap(-1, CHUNK_BYTES)  # anonymous maps are page-aligned
    return buffer


class DirectWriter:
    """An ``O_DIRECT`` descriptor on a file being written, and the alignment its direct writes keep."""

    def __init__(self, fd: int, align: int = ALIGN) -> None:
        self.fd = fd
        self.align = align
        self.enabled = True  # off once the file refused a direct write; the descriptor stays open until close()

    @classmethod
    def open(cls, path: Path) -> DirectWriter | None:
        """A direct writer on the existing file ``path``, or None where the system offers none, or where the file
        is not on a local block device: NFS, SMB, FUSE, tmpfs, overlayfs, btrfs and ZFS report anonymous device
        numbers (major 0), and on them ``O_DIRECT`` ranges from unsupported to synchronous network round trips,
        so their files keep the page cache."""
        flag = getattr(os, "O_DIRECT", 0)
        if not flag or env_true("EAGLEQUANT_NO_DIRECT_IO"):
            return None
        try:
            fd = os.open(path, os.O_WRONLY | flag)
        except OSError:
            return None
        try:
            stat = os.fstat(fd)
        except OSError:
            stat = None
        if stat is None or os.major(stat.st_dev) == 0:
            os.close(fd)
            return None
        return cls(fd, _alignment(stat.st_blksize))

    def interior(self, start: int, end: int) -> tuple[int, int]:
        """The part of ``[start, end)`` this file's direct writes can cover."""
        return aligned_interior(start, end, self.align)

    def copy(self, src_fd: int, src_offset: int, out: int, nbytes: int) -> bool:
        """Copy ``nbytes`` from ``src_fd`` at ``src_offset`` to the file at ``out``, both ``out`` and ``nbytes``
        multiples of ``align``. False (nothing promised about the range) when the file refuses direct writes:
        direct writing is then off for good, and the caller writes the range through the page cache."""
        if out % self.align or nbytes % self.align:
            raise ValueError(f"direct copy of [{out}, {out + nbytes}) is not {self.align}-aligned")
        buffer = _buffer()
        done = 0
        while done < nbytes:
            size = min(CHUNK_BYTES, nbytes - done)
            view = memoryview(buffer)[:size]
            _read_source(src_fd, view, src_offset + done)
            if not self._write(view, out + done):
                return False
            done += size
        return True

    def _write(self, view: memoryview, offset: int) -> bool:
        written = 0
        while written < len(view):
            if not self.enabled:
                return False
            try:
                written += os.pwrite(self.fd, view[written:], offset + written)
            except OSError as exc:
                if exc.errno not in _REFUSED:
                    raise
                self.enabled = False
                return False
        return True

    def close(self) -> None:
        """Once no thread writes any more."""
        self.enabled = False
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _alignment(block_size: int) -> int:
    """Whole filesystem blocks where they are larger than a page (XFS allows up to 64 KiB), so that a direct write
    never shares a block with the page cache's writes around it."""
    if block_size > ALIGN and block_size & (block_size - 1) == 0 and CHUNK_BYTES % block_size == 0:
        return block_size
    return ALIGN


def _read_source(fd: int, view: memoryview, offset: int) -> None:
    try:
        complete = read_exactly(fd, view, offset)
    except OSError as exc:
        raise SourceReadError(exc.errno, exc.strerror) from exc
    if not complete:
        raise EOFError(f"source ended within bytes [{offset}, {offset + len(view)})")
