"""RemoteFile: one file of a remote cache, mapped from the node cache once fetched, else read by byte ranges.

The maps are the process's (``_open_maps``): one per node-cache file whatever the dataset reading it, at most
``RemoteConfig.open_shards`` idle ones.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torch_drt.checksums import sha256_file, xxh3_128_hex
from torch_drt.locations._arrivals import Arrival, arrivals
from torch_drt.locations._open_maps import MapKey, Mapped, maps
from torch_drt.locations.base import StoredFile
from torch_drt.locations.errors import CacheCorruptError

if TYPE_CHECKING:
    from torch_drt.locations.remote import RemoteBackend


logger = logging.getLogger("torch_drt.cache")


def keep_mapped_only(keys: set[str]) -> None:
    """Unmap this process's idle shards whose keys are not in ``keys`` (so that the node cache may evict them)."""
    maps().keep_only(keys)


def verify_download(path: Path | bytes, checksum: tuple[str, str], where: str | Path) -> None:
    """Raise ``CacheCorruptError`` unless the file at ``path`` (or the bytes read from it) has the checksum the
    manifest records."""
    algo, expected = checksum
    if algo == "object":  # a foreign dataset's file without a checksum: its ETag keys it, its size was checked
        return
    if isinstance(path, bytes):
        actual = hashlib.sha256(path).hexdigest() if algo == "sha256" else xxh3_128_hex(path)
    else:
        actual = sha256_file(path) if algo == "sha256" else xxh3_128_hex(path.read_bytes())
    if actual != expected:
        raise CacheCorruptError(
            where, f"{algo} of the downloaded file is {actual}, the manifest records {expected} (damaged?)"
        )


def damaged_again(path: Path, where: str | Path, damage: str) -> CacheCorruptError:
    """The error for a node-cache copy found damaged after it was already fetched anew once: it names the local
    file (the remote one was verified twice)."""
    return CacheCorruptError(
        path, f"the node cache's copy of {where} was damaged again after it was fetched anew ({damage}); check the "
        "node's disk, or remove the file"
    )


class _Local:
    """The prefetcher's mark of a file found local (nothing to release)."""

    def close(self) -> None:
        pass


_LOCAL = _Local()


class RemoteFile(StoredFile):
    """One remote file of a cache: mapped from the node cache once fetched, else read by byte ranges.

    Attributes:
        key: its content key in the node cache (``"sha256-<hex>"``; ``"object-<hex>"`` for a foreign dataset's
            file that records no checksum: a digest of its URL, size and ETag, see ``torch_drt.formats``).
        ranges_ok: whether reads may use byte ranges (the reader verifies every record's checksum).
    """

    def __init__(self, backend: RemoteBackend, rel: str, size: int, checksum: tuple[str, str], ranges_ok: bool):
        super().__init__(backend.where(rel), size)
        self.backend, self.rel, self.checksum, self.ranges_ok = backend, rel, checksum, ranges_ok
        self.key = f"{checksum[0]}-{checksum[1]}"
        self.downloadable = checksum[0] in ("sha256", "xxh3_128", "object")
        self._kept: Mapped | None = None  # mapped for the reader's life (the index), outside the open-shards budget
        self._replaced = False  # the node cache's copy was found damaged and fetched anew (once per file)

    def present(self) -> bool:
        """True when the node cache holds the verified file."""
        return self.backend.node.has(self.key, self.size)

    def hold(self) -> _Local | None:
        """A mark that the node cache holds the file now (the prefetcher keeps it for the files of its window; it
        holds no lock: the window must not hold the node cache over its limit); None when it is not there."""
        return _LOCAL if self.present() else None

    def touch(self) -> None:
        """Mark the node cache's copy recently used (no-op when it is not there)."""
        self.backend.node.touch(self.key)

    def demote(self) -> None:
        """Let the node cache evict its copy before the files still wanted (no-op when it is not there)."""
        self.backend.node.demote(self.key)

    def fetch(self, optional: bool = False, requested: Callable[[], None] | None = None) -> bool:
        """Download the file into the node cache (or wait for the process of the node that does); with
        ``optional`` (a prefetch), only when it fits under the node cache's limit now (False when not).
        ``requested()`` is called when this process's request for it is about to go out (not when it finds the
        file local or another process's download)."""
        backend = self.backend
        # another process's download: its bytes as soon as they are all in, for this process's reads that check
        # every record (as a download of this process posts them, up to the same size: RemoteConfig.handed_whole)
        whole = Arrival(self.key) if self.ranges_ok and backend.config.handed_whole(self.size) else None
        with arrivals().expecting(self.key):  # a read waiting for it meanwhile may take its bytes as they come
            return backend.node.fetch(self.key, self.size,
                                      lambda fd: backend.download(self.rel, fd, self.size, self.checksum, requested),
                                      self._check, str(self.where), optional, whole)

    def arrived(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes] | None:
        """The ranges sliced from the bytes a download of this process received for this file (before its sync,
        SHA-256 and rename; see ``_arrivals``), waiting for them while such a download is in flight; None when the
        reader does not check every record of it (no record checksums) or no such bytes come."""
        if not self.ranges_ok:
            return None
        data = arrivals().wait(self.key, lambda: self.backend.prefetcher.pending(self.key))
        if data is None or len(data) != self.size:
            return None
        return [data[a:b] for a, b in zip(starts, ends)]

    def _check(self, path: Path) -> None:
        verify_download(path, self.checksum, self.where)

    def recheck(self) -> bool:
        """After a read failed its checks: verify the node cache's copy again; a damaged one (a disk fault, a
        hand edit after it was verified) is removed and fetched anew, once. Unmapped first either way, so that
        a read again maps the file the node cache holds now.

        Raises:
            CacheCorruptError: naming the local copy, when it was damaged again after it was fetched anew.
        """
        if not self.downloadable:
            return False
        self.release()
        node = self.backend.node
        if not node.has(self.key, self.size):
            return False
        path = node.path(self.key)
        try:
            self._check(path)
            return False  # the copy is the verified file: the fault lies elsewhere (the index, the remote file)
        except CacheCorruptError as e:
            damage = e.reason
        if self._replaced:
            raise damaged_again(path, self.where, damage)
        logger.warning("node cache copy %s of %s is damaged (%s): fetching it again", path, self.where, damage)
        self._replaced = True
        node.discard(self.key)
        self.fetch()
        return True

    def _map_key(self) -> MapKey:
        return (str(self.backend.node.directory), self.key)

    def _acquire(self, wait: bool, keep: bool = False) -> Mapped | None:
        """The file's map with one more user, fetching the file first when ``wait``; None when it is not local."""
        key, node, cap = self._map_key(), self.backend.node, self.backend.config.open_shards
        for _ in range(3):  # an eviction between a fetch and the pin: fetch again
            mapped = maps().acquire(key, lambda: node.pin(self.key, self.size), cap, keep)
            if mapped is not None or not wait:
                return mapped
            self.fetch()
        raise CacheCorruptError(self.where, "the node cache lost the file three times in a row")

    def keep(self) -> None:
        """Map the file for the reader's life, fetching it first (the index, read through ``view``)."""
        if self._kept is None:
            self._kept = self._acquire(wait=True, keep=True)

    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return self.backend.gather([self], [0] * len(starts), starts, ends)

    def slices(self, starts: Sequence[int], ends: Sequence[int], wait: bool) -> list[bytes] | None:
        """The ranges sliced from the mapped file, or None when it is not local (and not ``wait``)."""
        mapped = self._acquire(wait)
        if mapped is None:
            return None
        try:
            m = mapped.pinned.map
            return [m[a:b] for a, b in zip(starts, ends)]
        finally:
            maps().done(self._map_key())

    def view(self) -> memoryview | None:
        kept = self._kept  # a kept map stays mapped while this file is open
        return memoryview(kept.pinned.map) if kept is not None else maps().view(self._map_key())

    def check(self) -> None:
        kept = self._kept
        size = kept.pinned.size_now() if kept is not None else maps().size(self._map_key())
        if size is not None and self.size and size != self.size:
            raise CacheCorruptError(self.where, "the node cache's copy changed size while mapped")

    def release(self) -> None:
        """Unmap when no read uses the map (the node cache may evict the file again); the next read maps or
        fetches it anew."""
        maps().release(self._map_key())

    def close(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            maps().done(self._map_key(), keep=True)
        self.release()


def downloadable(files: Sequence[StoredFile], first: int) -> tuple[list[RemoteFile], int]:
    """The files of ``files`` the node cache can download, in order, and how many are among the first ``first``."""
    planned = [f for f in files if isinstance(f, RemoteFile) and f.downloadable]
    return planned, sum(1 for f in files[:first] if isinstance(f, RemoteFile) and f.downloadable)
