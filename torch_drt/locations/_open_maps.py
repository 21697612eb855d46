"""OpenMaps: the node-cache files this process maps, one map per file whatever the dataset that reads it.

Two datasets of one remote cache in a process (a training and a validation loader, a cache opened again to
resume) read a shard through one map: one descriptor, one shared lock, page tables filled once. Idle maps stay,
least recently used first, up to ``RemoteConfig.open_shards`` of them (maps held for a reader's life, the index,
do not count); a forked child keeps only those (it closes its copies of the others). An idle map holds no lock:
the node cache may evict its file (its limit is not held up by maps nobody reads); the next read of it locks it
again and, finding it evicted, maps the file anew (after fetching it), and a new map closes the idle maps of
evicted files (so that their disk space is freed).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable

from torch_drt.nodecache.node_cache import PinnedFile

MapKey = tuple[str, str]  # (node cache directory, content key)


class Mapped:
    """One mapped file: its pin, the reads using it now (``users``) and the readers holding it for their life
    (``kept``; each is a user too)."""

    def __init__(self, pinned: PinnedFile) -> None:
        self.pinned, self.users, self.kept = pinned, 0, 0


class OpenMaps:
    """The maps of this process (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: collections.OrderedDict[MapKey, Mapped] = collections.OrderedDict()

    def acquire(self, key: MapKey, pin: Callable[[], PinnedFile | None], cap: int, keep: bool = False) -> Mapped | None:
        """The map of ``key`` with one more user (``pin()`` maps it when it is not mapped yet); None when ``pin``
        finds no file. Beyond ``cap`` idle maps, the least recently used ones are unmapped.

        Args:
            key: the file's node cache and content key.
            pin: maps the file (``NodeCache.pin``), or returns None.
            cap: idle maps kept at most.
            keep: the user holds the map for its life (``done(key, keep=True)`` lets it go).
        """
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is not None and (mapped.users or mapped.pinned.relock()):
                return self._use(key, mapped, cap, keep)
            if mapped is not None:  # evicted while idle: its map is of a file no longer in the cache
                self._close(key)
        pinned = pin()  # outside the lock: the system calls of one file do not hold up the others' reads
        if pinned is None:
            return None
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is None:
                mapped = self._maps[key] = Mapped(pinned)
                pinned = None
                for old in [k for k, m in self._maps.items() if not m.users and m.pinned.gone()]:
                    self._close(old)  # idle maps of evicted files: their disk space is freed now
            out = self._use(key, mapped, cap, keep)
        if pinned is not None:  # another thread mapped it meanwhile
            pinned.close()
        return out

    def _close(self, key: MapKey) -> None:
        with contextlib.suppress(OSError):
            self._maps.pop(key).pinned.close()

    def _use(self, key: MapKey, mapped: Mapped, cap: int, keep: bool) -> Mapped:
        mapped.users += 1
        mapped.kept += keep
        self._maps.move_to_end(key)
        if len(self._maps) <= cap:  # within the budget whatever is kept (the common case: nothing to count)
            return mapped
        counted = sum(1 for m in self._maps.values() if not m.kept)
        idle = [k for k, m in self._maps.items() if m.users == 0 and not m.kept]
        for old in idle[: max(0, counted - cap)]:
            self._close(old)
        return mapped

    def done(self, key: MapKey, keep: bool = False) -> None:
        """One user of ``key`` is done with it (the map stays, idle, until it is unmapped)."""
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is not None:
                mapped.users -= 1
                mapped.kept -= keep
                if not mapped.users:  # idle: the node cache may evict it (the next read relocks and checks)
                    with contextlib.suppress(OSError):
                        mapped.pinned.unlock()

    def view(self, key: MapKey) -> memoryview | None:
        """A buffer over the map of ``key`` (it keeps the mapping alive, even once unmapped here), or None (not
        mapped, or its file evicted since the map went idle)."""
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is None or not (mapped.users or not mapped.pinned.gone()):
                return None  # not mapped, or an idle map of a file evicted since
            return memoryview(mapped.pinned.map)

    def size(self, key: MapKey) -> int | None:
        """The size of the mapped file ``key`` now, or None when it is not mapped."""
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is None:
                return None
            return mapped.pinned.size_now()

    def release(self, key: MapKey) -> None:
        """Unmap ``key`` when no read uses it (the node cache may evict the file again)."""
        with self._lock:
            mapped = self._maps.get(key)
            if mapped is not None and mapped.users == 0:
                del self._maps[key]
                mapped.pinned.close()

    def keep_only(self, keys: set[str]) -> None:
        """Unmap the idle maps whose content keys are not in ``keys`` (no planned read needs them).

        A hint, skipped while the lock is held: a loader that the garbage collector finalises runs this from
        inside whatever this thread was doing, possibly ``acquire`` holding the lock (waiting would hang the thread
        for ever). What is skipped stays idle and unlocked (the node cache may evict it) until the cap unmaps it.
        """
        if not self._lock.acquire(blocking=False):
            return
        try:
            for key in [k for k, m in self._maps.items() if m.users == 0 and k[1] not in keys]:
                self._maps.pop(key).pinned.close()
        finally:
            self._lock.release()


_MAPS = OpenMaps()


def maps() -> OpenMaps:
    """This process's maps."""
    return _MAPS


def _after_fork() -> None:
    """The child maps its own files: it closes its copies of the parent's idle maps (the parent's locks stay with
    the parent's descriptors) and keeps the maps held for a reader's life (the index its readers use)."""
    global _MAPS
    inherited, _MAPS = _MAPS._maps, OpenMaps()
    for key, mapped in list(inherited.items()):
        if mapped.kept:
            mapped.users = mapped.kept
            _MAPS._maps[key] = mapped
        else:
            with contextlib.suppress(OSError):
                mapped.pinned.close()


os.register_at_fork(after_in_child=_after_fork)
