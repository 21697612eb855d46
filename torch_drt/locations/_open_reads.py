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

    def expect(self, rels: Sequence[str]) -> None:
        """``rels`` are read right after the next manifest read."""
        self._expected = tuple(rels)

    def take_expected(self) -> tuple[str, ...]:
        """The files expected after this manifest read (the hint holds for one read)."""
        expected, self._expected = self._expected, ()
        return expected

    def fetch_with(self, store: RemoteStore, rel: str, limit: int, also: Sequence[str]) -> bytes | None:
        """Manifest ``rel`` (None when missing) and the first ``GUESS_BYTES`` of each of ``also``, requested at
        once; the others are kept when whole. A failure of the manifest's request other than a missing file is
        retried as ``RemoteStore.read`` retries it; the others' failures are ignored (they are fetched when read)."""
        got = store.read_at_once([rel, *also], [limit, *[GUESS_BYTES] * len(also)])
        with self._lock:
            for other, data in zip(also, got[1:]):
                if isinstance(data, bytes) and len(data) <= GUESS_BYTES:
                    self._copies[other] = data
        manifest = got[0]
        if isinstance(manifest, FileNotFoundError):
            return None
        return manifest if isinstance(manifest, bytes) else store.read_or_none(rel, limit)

    def take(self, rel: str, checksum: tuple[str, str], where: str) -> bytes | None:
        """The copy of ``rel`` fetched with the manifest when it has ``checksum`` (once), else None."""
        with self._lock:
            data = self._copies.pop(rel, None)
        if data is None:
            return None
        try:
            verify_download(data, checksum, where)
        except CacheCorruptError:
            return None
        return data
