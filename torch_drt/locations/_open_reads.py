"""The files an open reads right after a manifest (its index and metadata), fetched together with the manifest on
a node that never read it: one round trip instead of two. What comes with the manifest is not verified yet: it is
kept only until it is read, and used only when it has the checksum the manifest records (another version,
published meanwhile, is fetched again)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from torch_drt.locations._remote_file import verify_download
from torch_drt.locations.errors import CacheCorruptError
from torch_drt.locations.remote_store import RemoteStore

GUESS_BYTES = 1 << 20  # the most of a file fetched with the manifest, before its size and checksum are known


class OpenReads:
    """One remote backend's hint (``expect``) and the copies fetched with its manifest."""

    def __init__(self) -> None:
        self._expected: tuple[str, ...] = ()
        self._copies: dict[str, bytes] = {}
        self._lock = threading.Lock()  # the index and the metadata are read on two threads
        self._pending: threading.Thread | None = None  # the request of the copies, while in flight

    def expect(self, rels: Sequence[str]) -> None:
        """``rels`` are read right after the next manifest read."""
        self._expected = tuple(rels)

    def take_expected(self) -> tuple[str, ...]:
        """The files expected after this manifest read (the hint holds for one read)."""
        expected, self._expected = self._expected, ()
        return expected

    def fetch_with(self, store: RemoteStore, rel: str, limit: int, also: Sequence[str]) -> bytes | None:
        """Manifest ``rel`` as ``RemoteStore.read_or_none`` reads it (retried, None when missing), while the first
        ``GUESS_BYTES`` of each of ``also`` are requested at once on another thread; those are kept when whole (a
        failure is ignored: the file is fetched when read)."""
        thread = threading.Thread(target=self._fetch, args=(store, also), name="torch_drt-open", daemon=True)
        thread.start()
        self._pending = thread
        return store.read_or_none(rel, limit)

    def _fetch(self, store: RemoteStore, also: Sequence[str]) -> None:
        got = store.read_at_once(also, [GUESS_BYTES] * len(also))
        with self._lock:
            for rel, data in zip(also, got):
                if isinstance(data, bytes) and len(data) <= GUESS_BYTES:
                    self._copies[rel] = data

    def take(self, rel: str, checksum: tuple[str, str], where: str) -> bytes | None:
        """The copy of ``rel`` fetched with the manifest when it has ``checksum`` (once), else None."""
        pending = self._pending
        if pending is not None:
            pending.join()  # (its requests are bounded by the store's time-outs)
        with self._lock:
            data = self._copies.pop(rel, None)
        if data is None:
            return None
        try:
            verify_download(data, checksum, where)
        except CacheCorruptError:
            return None
        return data
