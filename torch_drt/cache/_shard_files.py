"""Shard files of a cache being written: records written on the caller's thread, hashed and synced on helpers."""

from __future__ import annotations

import ctypes
import os
import sys
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache._format import shard_name
from torch_drt.cache._shard_hash import ShardHash
from torch_drt.publish import sync_and_close

_SYNC_FILE_RANGE_WRITE = 2
_IOV_MAX = 1024  # buffers per writev (Linux's and macOS's limit)


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

    The records are written on the calling thread, which releases the GIL for each write: a batch (``extend``) with
    one ``writev`` of its records (no copy), records appended one by one (``append``) gathered in one reused chunk
    buffer first. Nothing waits on a helper thread there, so a thread busy with Python never stalls behind one (a
    helper that needs the GIL back after each of its steps waits up to the interpreter's switch interval, 5 ms, while
    this thread runs Python; it gets it at once while this thread writes). Three helpers work behind the writes: one
    hashes each shard (SHA-256) where what was written lies in the page cache (``ShardHash``, a map, no copy), every
    ``_HASH_BYTES``; one starts the disk write-back every ``_WRITEBACK_BYTES``, through a duplicate of the shard's
    descriptor that it closes itself after the shard's last start (so no start waits behind a sync, or reaches a
    descriptor closed and reused meanwhile); one syncs the data written so far every ``_DATASYNC_BYTES`` (a device's
    volatile write cache is flushed only by a sync: flushed as the shard grows, the final sync has a few MiB left to
    wait for, not the whole cache) and each full shard while the next one fills, closing its descriptor after.
    ``seal`` hashes the rest of the last shard itself once the helper's reads are done
    (``digests`` are then known) and leaves its sync to the caller (``unsynced``), who syncs it with its other files
    at once (one journal commit instead of two: a small cache starts no helper thread at all); ``close`` waits for
    every other sync. A failed write raises at once; a failed read-back or sync raises from ``seal`` or ``close``.
    Not ``durable``, nothing is synced: no write-back is started, the full shards are closed unsynced and
    ``unsynced`` stays empty.
    """

    _CHUNK_BYTES = 4 << 20  # records appended one by one are gathered into a buffer of this size
    _HASH_BYTES = 8 << 20  # a shard is hashed (read back) every this many bytes written
    _WRITEBACK_BYTES = 1 << 20  # the disk write-back of a shard is started every this many bytes written
    _DATASYNC_BYTES = 8 << 20  # and its data synced every this many

    def __init__(self, directory: Path, max_bytes: int, durable: bool = True) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.durable = durable
        self.sizes: list[int] = []
        self.digests: list[str] = []
        self.index = array("Q")  # (shard, offset, length, checksum) of each record, flat
        self.unsynced: list[Path] = []  # the last shard, once sealed: written and closed, not synced
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-shard-hash")
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-shard-sync")
        self._writeback = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-shard-writeback")
        self._hashes: list[Future] = []  # each shard's read-backs, in order; each closed shard's last one is its digest
        self._synced: list[Future] = []  # each closed shard's sync, and each data sync of a growing one
        self._fd = -1
        self._writeback_fd = -1  # the write-back helper's duplicate of ``_fd`` (durable only)
        self._shard_hash: ShardHash  # the current shard's, from _open_next (below) on
        self._pos = 0  # bytes of the current shard, the chunk's included
        self._written = 0  # bytes of the current shard written to its file
        self._hashed = 0  # bytes of the current shard handed to the hasher
        self._unsynced = 0  # bytes written since the shard's write-back was last started
        self._unflushed = 0  # bytes written since the shard's data was last synced
        self._flushing = False  # a data sync of the current shard was queued (its descriptor is closed after)
        self._chunk: bytearray | None = None
        self._view = memoryview(b"")
        self._used = 0  # bytes in the chunk
        self._open_next()

    def _wrote(self, size: int) -> None:
        """Account ``size`` bytes just written: start the write-back and queue the read-back when due."""
        self._written += size
        self._unsynced += size
        self._unflushed += size
        if self._unsynced >= self._WRITEBACK_BYTES and self.durable:
            self._unsynced = 0
            if self._writeback_fd < 0:
                self._writeback_fd = os.dup(self._fd)
            self._writeback.submit(_start_writeback, self._writeback_fd)
        if self._unflushed >= self._DATASYNC_BYTES and self.durable:  # its failure is the write's (``close``)
            self._unflushed, self._flushing = 0, True
            self._synced.append(self._syncer.submit(_datasync, self._fd))
        if self._written - self._hashed >= self._HASH_BYTES:
            self._hashed = self._written
            self._hashes.append(self._hasher.submit(self._shard_hash.upto, self._written))

    def _flush_chunk(self) -> None:
        if self._used:
            _write_all(self._fd, [self._view[: self._used]])
            size, self._used = self._used, 0
            self._wrote(size)

    def _open_next(self) -> None:
        if self._fd >= 0:
            self._close_current()
        path = self.directory / shard_name(len(self.sizes))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._shard_hash = ShardHash(path)
        self._shard = len(self.sizes)
        self.sizes.append(0)
        self._pos = self._written = self._hashed = self._unsynced = self._unflushed = 0
        self._flushing = False

    def _close_current(self) -> None:
        """Write the shard's last chunk, queue its last read-back (its digest) and its sync on the helpers, which run
        while the next shard fills."""
        self._flush_chunk()
        fd, self._fd = self._fd, -1
        self._end_writeback()
        self._hashes.append(self._hasher.submit(self._shard_hash.finish, self._written))
        self._synced.append(self._syncer.submit(sync_and_close if self.durable else os.close, fd))
        self.sizes[-1] = self._pos

    def _end_writeback(self) -> None:
        """Queue the close of the write-back helper's descriptor of the current shard, after its starts."""
        if self._writeback_fd >= 0:
            fd, self._writeback_fd = self._writeback_fd, -1
            self._writeback.submit(os.close, fd)

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
        if used + n > self._CHUNK_BYTES:
            self._flush_chunk()
            used = 0
        if n > self._CHUNK_BYTES:  # written from its own buffer
            _write_all(self._fd, [data])
            self._wrote(n)
            return
        if self._chunk is None:
            self._chunk = bytearray(self._CHUNK_BYTES)
            self._view = memoryview(self._chunk)
        self._view[used : used + n] = data
        self._used = used + n

    def extend(self, records: list[bytes], checksums: list[int]) -> None:
        """Write records (with their checksums) as ``append`` does, one after another.

        A batch that fits the current shard is written with ``writev`` straight from its records, its index entries
        made at once; one that does not is appended record by record.
        """
        lengths = list(map(len, records))
        total = sum(lengths)
        pos = self._pos
        if len(records) == 1 or pos + total > self.max_bytes:
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
            _write_all(self._fd, records)
            self._wrote(total)
        self._pos = pos + total

    def seal(self) -> None:
        """Write the last shard and close it unsynced (``unsynced``), wait for every read-back (a failed one raises)
        and hash the rest of the last shard here; ``digests`` are then set.

        No record may be added afterwards; the shards but the last are durable once ``close`` returns, the last one
        once the caller synced ``unsynced``.
        """
        if self._fd < 0:
            return
        self._flush_chunk()
        fd, self._fd = self._fd, -1
        self.sizes[-1] = self._pos
        if self._flushing:  # after its data syncs
            self._synced.append(self._syncer.submit(os.close, fd))
        else:
            os.close(fd)
        self._end_writeback()
        if self.durable:
            self.unsynced.append(self._shard_hash.path)
        results = [f.result() for f in self._hashes]
        results.append(self._shard_hash.finish(self._written))
        self.digests = [r for r in results if r is not None]

    def close(self) -> None:
        """Seal, wait for the helpers and their syncs (a failed read-back or sync raises); the helper threads end."""
        try:
            try:
                self.seal()
            finally:
                for f in self._synced:
                    f.result()
        finally:
            self._hasher.shutdown(wait=True)
            self._syncer.shutdown(wait=True)
            self._end_writeback()
            self._writeback.shutdown(wait=True)
            if self._fd >= 0:  # a failure before the current shard's sync was queued
                os.close(self._fd)
                self._fd = -1
            if self._shard_hash is not None:
                self._shard_hash.close()


def _start_writeback(fd: int) -> None:
    """Start writing the shard's dirty pages to disk without waiting for them (Linux's ``sync_file_range``;
    elsewhere nothing): only a head start, its failure is ignored (the sync at close is what makes the shard
    durable, and reports errors)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def _datasync(fd: int) -> None:
    """Sync the data of a shard being written (``fdatasync``; ``fsync`` where there is none): its error must be
    raised, as a later sync of the same file may no longer report it."""
    getattr(os, "fdatasync", os.fsync)(fd)


def _write_all(fd: int, buffers: list[Any]) -> None:
    """Write ``buffers`` to ``fd`` in order, ``_IOV_MAX`` at a time with one ``writev`` each (the GIL released); a
    short write is continued."""
    for start in range(0, len(buffers), _IOV_MAX):
        part = buffers[start : start + _IOV_MAX]
        written = os.writev(fd, part)
        if written == sum(map(len, part)):
            continue
        for buffer in part:  # a short write (a signal, a disk filling up): the rest one buffer at a time
            view = memoryview(buffer).cast("B")
            if written >= len(view):
                written -= len(view)
                continue
            view, written = view[written:], 0
            while view:
                view = view[os.write(fd, view) :]
