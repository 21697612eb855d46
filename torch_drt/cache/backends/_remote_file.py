"""RemoteFile: one file of a remote cache, mapped from the node cache once fetched, else read by byte ranges.

Each process keeps at most ``RemoteConfig.open_shards`` idle shards mapped (least recently used go first); a
forked child starts with none (the parent's maps are not its to release).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torch_drt.cache.backends.base import StoredFile
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.node_cache import PinnedFile
from torch_drt.checksums import sha256_file, xxh3_128_hex

if TYPE_CHECKING:
    from torch_drt.cache.backends.remote import RemoteBackend

__all__ = ["RemoteFile", "keep_mapped_only", "verify_download"]


class _OpenMaps:
    """The shards this process keeps mapped, least recently used first; beyond the cap the oldest idle one goes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: collections.OrderedDict[int, RemoteFile] = collections.OrderedDict()

    def used(self, file: RemoteFile, cap: int) -> None:
        with self.lock:
            self.files[id(file)] = file
            self.files.move_to_end(id(file))
            idle = [f for f in self.files.values() if f is not file and f.users == 0]
            for old in idle[: max(0, len(self.files) - cap)]:
                self.files.pop(id(old), None)
                old.release()

    def forget(self, file: RemoteFile) -> None:
        with self.lock:
            self.files.pop(id(file), None)

    def keep_only(self, keys: set[str]) -> None:
        """Unmap the idle shards no planned read needs (so that the node cache may evict them)."""
        with self.lock:
            for key, file in list(self.files.items()):
                if file.users == 0 and file.key not in keys:
                    self.files.pop(key)
                    file.release()


_MAPS = _OpenMaps()


def _after_fork() -> None:  # the child maps its own shards (the parent's maps are not its to release)
    global _MAPS
    _MAPS = _OpenMaps()


os.register_at_fork(after_in_child=_after_fork)


def keep_mapped_only(keys: set[str]) -> None:
    """Unmap this process's idle shards whose keys are not in ``keys`` (so that the node cache may evict them)."""
    _MAPS.keep_only(keys)


def verify_download(path: Path, checksum: tuple[str, str], where: str | Path) -> None:
    """Raise ``CacheCorruptError`` unless the file at ``path`` has the checksum the manifest records."""
    algo, expected = checksum
    actual = sha256_file(path) if algo == "sha256" else xxh3_128_hex(path.read_bytes())
    if actual != expected:
        raise CacheCorruptError(
            where, f"{algo} of the downloaded file is {actual}, the manifest records {expected} (damaged?)"
        )


class RemoteFile(StoredFile):
    """One remote file of a cache: mapped from the node cache once fetched, else read by byte ranges.

    Attributes:
        key: its content key in the node cache (``"sha256-<hex>"``).
        ranges_ok: whether reads may use byte ranges (the reader verifies every record's checksum).
    """

    def __init__(self, backend: RemoteBackend, rel: str, size: int, checksum: tuple[str, str], ranges_ok: bool):
        super().__init__(backend.where(rel), size)
        self.backend, self.rel, self.checksum, self.ranges_ok = backend, rel, checksum, ranges_ok
        self.key = f"{checksum[0]}-{checksum[1]}"
        self.downloadable = checksum[0] in ("sha256", "xxh3_128")
        self.users = 0
        self.kept = False  # mapped for the reader's life (the index), outside the open-shards budget
        self._pinned: PinnedFile | None = None
        self._lock = threading.Lock()

    def present(self) -> bool:
        """True when the node cache holds the verified file."""
        return self.backend.node.has(self.key, self.size)

    def hold(self) -> PinnedFile | None:
        """Hold the node cache's copy against eviction (without mapping it); None when it is not there."""
        return self.backend.node.pin(self.key, self.size, mapped=False)

    def touch(self) -> None:
        """Mark the node cache's copy recently used (no-op when it is not there)."""
        self.backend.node.touch(self.key)

    def demote(self) -> None:
        """Let the node cache evict its copy before the files still wanted (no-op when it is not there)."""
        self.backend.node.demote(self.key)

    def fetch(self) -> None:
        """Download the file into the node cache (or wait for the process of the node that does)."""
        backend = self.backend
        backend.node.fetch(
            self.key, self.size, lambda fd: backend.download(self.rel, fd, self.size), self._check, str(self.where)
        )

    def _check(self, path: Path) -> None:
        verify_download(path, self.checksum, self.where)

    def _acquire(self, wait: bool) -> PinnedFile | None:
        """The mapped file with one more user, fetching it first when ``wait``; None when it is not local."""
        for _ in range(3):  # an eviction between a fetch and the pin: fetch again
            with self._lock:
                if self._pinned is None:
                    self._pinned = self.backend.node.pin(self.key, self.size)
                if self._pinned is not None:
                    self.users += 1
                    pinned = self._pinned
                    break
            if not wait:
                return None
            self.fetch()
        else:
            raise CacheCorruptError(self.where, "the node cache lost the file three times in a row")
        if not self.kept:
            _MAPS.used(self, self.backend.config.open_shards)
        return pinned

    def _done(self) -> None:
        with self._lock:
            self.users -= 1

    def mapped(self, wait: bool = False) -> bool:
        """Map the file when it is local (or, with ``wait``, fetch it first); True when it is mapped now."""
        pinned = self._acquire(wait)
        if pinned is not None:
            self._done()
        return pinned is not None

    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return self.backend.gather([self], [0] * len(starts), starts, ends)

    def slices(self, starts: Sequence[int], ends: Sequence[int], wait: bool) -> list[bytes] | None:
        """The ranges sliced from the mapped file, or None when it is not local (and not ``wait``)."""
        pinned = self._acquire(wait)
        if pinned is None:
            return None
        try:
            m = pinned.map
            return [m[a:b] for a, b in zip(starts, ends)]
        finally:
            self._done()

    def view(self) -> memoryview | None:
        pinned = self._pinned
        return None if pinned is None else memoryview(pinned.map)

    def check(self) -> None:
        pinned = self._pinned
        if pinned is not None and self.size and pinned.map.size() != self.size:
            raise CacheCorruptError(self.where, "the node cache's copy changed size while mapped")

    def release(self) -> None:
        """Unmap (the node cache may evict the file again); the next read maps or fetches it anew."""
        with self._lock:
            if self.users == 0 and self._pinned is not None:
                self._pinned.close()
                self._pinned = None

    def close(self) -> None:
        _MAPS.forget(self)
        self.release()
