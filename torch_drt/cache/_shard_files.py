"""Shard files of a cache being written: records gathered into large chunks, written and hashed on a helper thread."""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
from array import array
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache._format import shard_name

_SYNC_FILE_RANGE_WRITE = 2


def _libc_sync_file_range() -> Any:
    """``sync_file_range(fd, offset, nbytes, flags)`` of the C library on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _libc_sync_file_range()


class ShardFiles:
    """Appends records to numbered shard files, starting a new one past ``max_bytes``.

    A record is one copy into a preallocated chunk buffer; each full chunk is written with one ``write`` and
    hashed (SHA-256 of its shard) on a helper thread, which releases the GIL for both, so the source is read
    meanwhile. A record larger than a chunk is written from its own buffer; a batch of records (``extend``) is
    joined and written on the helper thread. A full shard is synced once, on a second helper thread, while the next
    one fills. ``seal`` queues the last shard's sync and waits for the writes only (``digests`` are then known), so
    the caller can write its other files while the shards sync; ``close`` waits for every sync. A failed write or
    sync (a full disk) raises from a later ``append``, from ``seal`` or from ``close``.
    """

    _CHUNK_BYTES = 4 << 20
    _MAX_CHUNKS = 8  # at most 32 MiB of records waiting for the helper thread (and the batches joined)
    _MAX_JOINED = 8 << 20  # a larger batch is appended record by record (a large record is not copied)
    _WRITEBACK_BYTES = 1 << 20  # the disk write-back of a shard is started every this many bytes written

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.sizes: list[int] = []
        self.digests: list[str] = []
        self.index = array("Q")  # (shard, offset, length, checksum) of each record, flat
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-shard")
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-shard-sync")
        self._jobs: deque[tuple[Future, bytearray | None]] = deque()  # in submission order, run in that order
        self._hashes: list[Future] = []  # each closed shard's SHA-256, once its writes are done
        self._synced: list[Future] = []  # each closed shard's sync
        self._free: list[bytearray] = []
        self._fd = -1
        self._pos = 0  # bytes of the current shard, the chunk's included
        self._used = 0  # bytes in the current chunk
        self._chunk: bytearray | None = None  # taken by the first record appended alone
        self._unsynced = 0  # bytes submitted since the shard's write-back was last started
        self._open_next()

    def _reap(self) -> None:
        """Take the finished writes (their chunks are free again); wait while too many are pending."""
        while self._jobs and (len(self._jobs) >= self._MAX_CHUNKS or self._jobs[0][0].done()):
            future, chunk = self._jobs.popleft()
            future.result()  # a failed write raises here
            if chunk is not None:
                self._free.append(chunk)

    def _take_chunk(self) -> bytearray:
        """A free chunk buffer (also ``self._view``)."""
        self._reap()
        chunk = self._free.pop() if self._free else bytearray(self._CHUNK_BYTES)
        self._view = memoryview(chunk)
        return chunk

    def _submit(self, data: Any, chunk: bytearray | None, size: int) -> None:
        """Queue the write of ``data`` (``size`` bytes) to the current shard; every ``_WRITEBACK_BYTES``, also the
        start of its write-back, so that the shard's sync at its close finds little left to write."""
        self._reap()
        job = self._writer.submit(_write_hashed, self._fd, self._hash, data)
        self._jobs.append((job, chunk))
        self._unsynced += size
        if self._unsynced >= self._WRITEBACK_BYTES:
            self._unsynced = 0
            self._syncer.submit(_start_writeback, self._fd, job)

    def _flush_chunk(self) -> None:
        if self._used:
            self._submit(self._view[: self._used], self._chunk, self._used)
            self._chunk, self._used = None, 0

    def _open_next(self) -> None:
        if self._fd >= 0:
            self._close_current()
        path = self.directory / shard_name(len(self.sizes))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._hash = hashlib.sha256()
        self._shard = len(self.sizes)
        self.sizes.append(0)
        self._pos = self._unsynced = 0

    def _close_current(self) -> None:
        """Queue the shard's last chunk, and its sync on a second thread once written, while the next shard fills."""
        self._flush_chunk()
        fd, self._fd = self._fd, -1
        last = self._jobs[-1][0] if self._jobs else None  # the writes run in order: the shard is written after it
        self._hashes.append(self._writer.submit(self._hash.hexdigest))  # after the shard's last write
        self._synced.append(self._syncer.submit(_sync_and_close, fd, last))
        self.sizes[-1] = self._pos

    def _wait_all(self) -> None:
        while self._jobs:
            future, chunk = self._jobs.popleft()
            future.result()
            if chunk is not None:
                self._free.append(chunk)

    def append(self, data: bytes, checksum: int) -> None:
        """Write one record and add its (shard, offset, length, ``checksum``) to ``index``.

        An empty record never starts a new shard, so no shard is empty unless every record is.
        """
        n = len(data)
        offset = self._pos
        if n and offset and offset + n > self.max_bytes:
            self._open_next()
            offset = 0
        self._pos = offset + n
        self.index.extend((self._shard, offset, n, checksum))
        used = self._used
        if used + n <= self._CHUNK_BYTES:
            if self._chunk is None:
                self._chunk = self._take_chunk()
            self._view[used : used + n] = data
            self._used = used + n
        else:
            self._flush_chunk()
            if n <= self._CHUNK_BYTES:
                self._chunk = self._take_chunk()
                self._view[:n] = data
                self._used = n
            else:  # written from its own buffer, which the job keeps alive
                self._submit(data, None, n)

    def extend(self, records: list[bytes], checksums: list[int]) -> None:
        """Write records (with their checksums) as ``append`` does, one after another.

        A batch that fits the current shard is joined and written as one buffer on the helper thread (``bytes.join``
        copies without holding the GIL), its index entries made at once: the list is kept until then, so the caller
        must not change it afterwards. A batch that does not fit, or is larger than ``_MAX_JOINED``, is appended
        record by record.
        """
        lengths = list(map(len, records))
        total = sum(lengths)
        pos = self._pos
        if len(records) == 1 or total > self._MAX_JOINED or pos + total > self.max_bytes:
            for data, checksum in zip(records, checksums):
                self.append(data, checksum)
            return
        self._flush_chunk()  # the chunk's records come first in the file
        entries = np.empty((len(records), 4), dtype=np.uint64)
        entries[:, 0] = self._shard
        entries[:, 2] = lengths
        np.cumsum(entries[:, 2], out=entries[:, 1])
        entries[:, 1] -= entries[:, 2]
        entries[:, 1] += pos
        entries[:, 3] = np.fromiter(checksums, dtype=np.uint64, count=len(records))
        self.index.frombytes(entries.tobytes())
        if total:
            self._submit(records, None, total)
        self._pos = pos + total

    def seal(self) -> None:
        """Queue the last shard's sync and wait for every write (a failed one raises); ``digests`` are then set.

        No record may be added afterwards; the shards are durable once ``close`` returns.
        """
        if self._fd >= 0:
            self._close_current()
        self._wait_all()
        self.digests = [f.result() for f in self._hashes]

    def close(self) -> None:
        """Write what is pending and sync every shard (a failed write or sync raises); the helper threads end."""
        try:
            self.seal()
            for f in self._synced:
                f.result()
        finally:
            self._writer.shutdown(wait=True)
            self._syncer.shutdown(wait=True)
            if self._fd >= 0:  # a failure before the current shard's sync was queued
                os.close(self._fd)
                self._fd = -1


def _start_writeback(fd: int, written: Future) -> None:
    """Once ``written`` is done, start writing the shard's dirty pages to disk without waiting for them (Linux's
    ``sync_file_range``; elsewhere nothing): only a head start, its failure is ignored (the sync at close is what
    makes the shard durable, and reports errors)."""
    if _sync_file_range is not None and written.exception() is None:
        _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def _sync_and_close(fd: int, last: Future | None) -> None:
    """Once ``last`` (the shard's last write) is done, sync and close the shard (closed even when a write failed)."""
    try:
        if last is not None:
            last.result()
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_hashed(fd: int, h: Any, data: Any) -> None:
    """Append ``data`` (a buffer, or a list of records joined here) to ``fd`` (a short write is continued) and add it
    to the shard's hash."""
    if type(data) is list:
        data = b"".join(data)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    h.update(data)
