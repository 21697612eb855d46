"""The files an open reads right after a manifest (its index and metadata), fetched together with the manifest on
a node that never read it: one round trip instead of two. What comes with the manifest is not verified yet: it is
kept in memory until it is read, and used only when it has the checksum the manifest records (another version,
published meanwhile, is fetched again); it also goes into the node cache under its own XXH3-128 (content-addressed:
only a manifest naming that checksum uses it) before the manifest copy does, for the node's other processes."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch_drt.checksums import xxh3_128_hex
from torch_drt.locations._remote_file import verify_download
from torch_drt.locations.errors import CacheCorruptError
from torch_drt.locations.remote_store import RemoteStore

if TYPE_CHECKING:
    from torch_drt.nodecache.node_cache import NodeCache

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

    def fetch_with(
        self, store: RemoteStore, rel: str, limit: int, also: Sequence[str], node: NodeCache | None = None
    ) -> bytes | None:
        """Manifest ``rel`` as ``RemoteStore.read_or_none`` reads it (retried, None when missing), while the first
        ``GUESS_BYTES`` of each of ``also`` are requested at once on another thread; those are kept when whole (a
        failure is ignored: the file is fetched when read), and put in ``node`` under their own XXH3-128 (the
        key a format-2 manifest names them by) before the manifest is returned: the node's other processes, which
        wait for this manifest copy, find them there."""
        thread = threading.Thread(target=self._fetch, args=(store, also, node), name="torch_drt-open", daemon=True)
        thread.start()
        self._pending = thread
        try:
            return store.read_or_none(rel, limit)
        finally:
            thread.join()  # (its requests are bounded by the store's time-outs)

    def _fetch(self, store: RemoteStore, also: Sequence[str], node: NodeCache | None) -> None:
        got = store.read_at_once(also, [GUESS_BYTES] * len(also))
        kept = []
        for rel, data in zip(also, got):
            if isinstance(data, bytes) and len(data) <= GUESS_BYTES:
                with self._lock:
                    self._copies[rel] = data
                kept.append((data, store.join(rel)))
        if node is not None:
            _keep_all(node, kept)


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


def _keep_all(node: NodeCache, files: Sequence[tuple[bytes, str]]) -> None:
    """``_keep`` each of ``files`` (bytes, URL), at once: each write waits for its disk (a sync), not for the others';
    returns when all are done."""
    threads = [threading.Thread(target=_keep, args=(node, *f), name="torch_drt-open-keep", daemon=True)
               for f in files[1:]]
    for thread in threads:
        thread.start()
    try:
        if files:
            _keep(node, *files[0])
    finally:
        for thread in threads:
            thread.join()


def _keep(node: NodeCache, data: bytes, where: str) -> None:
    """Put ``data`` in the node cache under its own XXH3-128 (content-addressed: whatever names that key wants these
    bytes); skipped when there is no room, and on any failure (the file is fetched when read)."""
    key = f"xxh3_128-{xxh3_128_hex(data)}"

    def write(fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    with contextlib.suppress(Exception):  # a copy fetched ahead is a hint only
        node.fetch(key, len(data), write, lambda path: verify_download(path, ("xxh3_128", key[9:]), where), where,
                   optional=True)
