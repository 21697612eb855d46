"""Shard files of a cache being written: numbered, memory-mapped while filled, hashed on a helper thread."""

from __future__ import annotations

import hashlib
import mmap
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_drt.cache._format import shard_name

__all__ = ["ShardFiles"]


class ShardFiles:
    """Appends records to numbered shard files, starting a new one past ``max_bytes``.

    Each shard is a file sized up front and memory-mapped, so a record is one copy into the page cache (no
    write syscalls); records are hashed in chunks on a helper thread meanwhile (hashlib releases the GIL, so both
    cores work). Closing a shard syncs it and cuts the file to the bytes written.
    """

    _CHUNK_BYTES = 4 << 20
    _MAX_HASH_JOBS = 8  # at most 32 MiB of payloads waiting for the hash

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.sizes: list[int] = []
        self.digests: list[str] = []
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-hash")
        self._hash_jobs: deque[Future] = deque()
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._pos = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._open_next()

    def _open_next(self) -> None:
        if self._fd >= 0:
            self._close_current()
        path = self.directory / shard_name(len(self.sizes))
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(self._fd, self.max_bytes)  # sparse: only written pages take space
        self._map = mmap.mmap(self._fd, self.max_bytes)
        self._hash = hashlib.sha256()
        self.sizes.append(0)
        self._pos = 0

    def _hash_pending(self) -> None:
        chunk, self._pending, self._pending_bytes = self._pending, [], 0
        if not chunk:
            return
        # One hashing thread runs the jobs in submission order; wait only when it lags far behind (memory).
        while len(self._hash_jobs) >= self._MAX_HASH_JOBS:
            self._hash_jobs.popleft().result()
        self._hash_jobs.append(self._hasher.submit(_update_all, self._hash, chunk))

    def _close_current(self) -> None:
        self._hash_pending()
        while self._hash_jobs:
            self._hash_jobs.popleft().result()
        self._map.flush()
        self._map.close()
        self._map = None
        os.ftruncate(self._fd, self._pos)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.sizes[-1] = self._pos
        self.digests.append(self._hash.hexdigest())

    def append(self, data: bytes) -> tuple[int, int, int]:
        """Write one record; return its (shard, offset, length).

        An empty record never starts a new shard, so no shard is empty unless every record is.
        """
        n = len(data)
        if n and self._pos and self._pos + n > self.max_bytes:
            self._open_next()
        offset, end = self._pos, self._pos + n
        if end > len(self._map):  # one record larger than max_bytes: this shard holds it alone
            os.ftruncate(self._fd, end)
            self._map.resize(end)
        self._map[offset:end] = data
        self._pos = end
        self._pending.append(data)
        self._pending_bytes += n
        if self._pending_bytes >= self._CHUNK_BYTES:
            self._hash_pending()
        return len(self.sizes) - 1, offset, n

    def close(self) -> None:
        try:
            if self._fd >= 0:
                self._close_current()
        finally:
            self._hasher.shutdown(wait=True)


def _update_all(h: Any, chunk: list[bytes]) -> None:
    for data in chunk:
        h.update(data)
