"""The bytes of a shard this process is downloading, for the reads of this process that wait for that download.

A download into the node cache ends with a disk sync, a SHA-256 of the file and a rename; a read that waits for
the shard (a cold start: the first batch's shards, at 0 workers) need not wait for those. The download posts the
shard's bytes here as soon as they are all in (a download of one request: up to ``RemoteConfig.chunk_bytes``; a
fetch that waits for another process's download posts them once that download wrote them all, read from its file:
``nodecache._whole_files``), and a waiting read of a cache whose records carry their own checksums (format 2: the
reader checks every record read from a URL, as for byte ranges) slices them from memory. The bytes are held while
the download is in flight only; nothing here is trusted beyond what the reader's record checks prove, and the node
cache's copy is verified by its SHA-256 as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

_STARTING_S = 0.001  # how often a read asks again whether the fetch it waits for is in flight yet


class _Entry:
    """One file's downloads in flight in this process (``users``), the reads waiting for its bytes (``waiting``)
    and the bytes one of them received."""

    __slots__ = ("data", "users", "waiting")

    def __init__(self) -> None:
        self.users, self.waiting = 0, 0
        self.data: bytes | None = None


class Arrivals:
    """This process's shard bytes in flight, by node-cache key (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[str, _Entry] = {}

    @contextlib.contextmanager
    def expecting(self, key: str) -> Iterator[None]:
        """Around a fetch of ``key`` (which may download it, or wait for another process's download): the reads
        that ``wait`` for ``key`` meanwhile get its bytes when this process receives them, or None once it ends."""
        with self._cond:
            entry = self._entries.setdefault(key, _Entry())
            entry.users += 1
        try:
            yield
        finally:
            with self._cond:
                entry.users -= 1
                if not entry.users and self._entries.get(key) is entry:
                    del self._entries[key]
                self._cond.notify_all()

    def post(self, key: str, data: bytes) -> None:
        """The whole file ``key`` was received by a download of this process (not verified yet)."""
        with self._cond:
            entry = self._entries.get(key)
            if entry is not None:
                entry.data = data
                self._cond.notify_all()

    def waited(self, key: str) -> bool:
        """True while a read waits for the bytes of ``key`` (a fetch in flight, no bytes received yet)."""
        with self._cond:
            entry = self._entries.get(key)
            return entry is not None and entry.data is None and entry.waiting > 0

    def wait(self, key: str, pending: Callable[[], bool] | None = None) -> bytes | None:
        """The bytes of ``key`` once a fetch of this process received them; None when no fetch of ``key`` is in
        flight here, or when it ends without them (found local, several requests, a failure, another process's
        download that ended before all its bytes were seen). ``pending()`` says whether a fetch of ``key`` is
        queued or starting (the prefetcher's, which a read just asked for): the wait goes on until that fetch is
        in flight. The wait is bounded by the fetch's (the store's time-outs)."""
        while True:
            with self._cond:
                entry = self._entries.get(key)
                while entry is not None and entry.data is None:
                    entry.waiting += 1
                    try:
                        self._cond.wait()
                    finally:
                        entry.waiting -= 1
                    entry = self._entries.get(key)
                if entry is not None:
                    return entry.data
            if pending is None or not pending():  # (asked outside this lock: the prefetcher's is its own)
                return None
            with self._cond:
                if key not in self._entries:
                    self._cond.wait(_STARTING_S)  # the fetch is queued or starting: it enters ``expecting`` soon


_ARRIVALS = Arrivals()


class Arrival:
    """The receiver of another process's download of ``key`` for this process's reads (``NodeCache.fetch``'s
    ``whole``): its bytes are read only while a read waits for them."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def wanted(self) -> bool:
        return arrivals().waited(self.key)

    def take(self, data: bytes) -> None:
        arrivals().post(self.key, data)


def arrivals() -> Arrivals:
    """This process's arrivals."""
    return _ARRIVALS


def _after_fork() -> None:
    """A child starts without the parent's downloads (their threads are not the child's)."""
    global _ARRIVALS
    _ARRIVALS = Arrivals()


os.register_at_fork(after_in_child=_after_fork)
