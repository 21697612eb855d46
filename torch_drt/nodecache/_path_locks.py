"""One in-process lock per lock-file path: the threads of a process queue on it before they take the file's
``flock``, so that a thread waiting for another thread of its process (the read that waits for the prefetcher's
download of its shard, the downloads queueing on the space accounting) wakes the moment that one is done, instead
of polling the file lock (which only other processes still need).
"""

from __future__ import annotations

import os
import threading


class PathLock:
    """The lock of one path and how many threads hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_GUARD = threading.Lock()
_LOCKS: dict[str, PathLock] = {}  # an entry goes when its last user releases it


def _after_fork() -> None:
    """A lock held by a thread of the parent would never be released in the child: the child starts afresh."""
    global _GUARD
    _GUARD = threading.Lock()
    _LOCKS.clear()


os.register_at_fork(after_in_child=_after_fork)


def acquire(path: str, wait: float | None) -> tuple[PathLock, bool]:
    """Take the lock of ``path`` for this thread, waiting at most ``wait`` seconds (None: forever).

    Returns:
        The entry and whether it was taken: pass both to ``release`` (whatever the outcome).
    """
    with _GUARD:
        entry = _LOCKS.get(path)
        if entry is None:
            entry = _LOCKS[path] = PathLock()
        entry.users += 1
    return entry, entry.lock.acquire() if wait is None else entry.lock.acquire(timeout=max(0.0, wait))


def release(path: str, entry: PathLock, taken: bool) -> None:
    """Undo ``acquire(path)``: ``entry`` and ``taken`` are what it returned."""
    with _GUARD:
        if _LOCKS.get(path) is not entry:  # taken before a fork, released in the child: the parent's to release
            return
        if taken:
            entry.lock.release()
        entry.users -= 1
        if entry.users == 0:
            del _LOCKS[path]
