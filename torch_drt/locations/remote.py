"""The remote backend: a cache at a URL, read through the node cache (whole shards) or by byte ranges.

Opening costs three small reads: the manifest (fetched by one process of the node and reused for
``manifest_ttl`` seconds), then the index and the metadata table, which are content-addressed by the checksums
the manifest records, so each is fetched once per node. On a node that never read the manifest, the index and the
metadata are requested together with it (``expect``: one round trip instead of two; see ``_open_reads``).
Nothing is listed and no shard is touched at open.

Shards (``read_mode="shards"``) are downloaded whole into the node cache, verified against the manifest's
SHA-256 and memory-mapped from there. A read whose shard is being downloaded (by the prefetcher, or by another
process of the node) waits for it, and so does one that wants more than half of the shard's bytes; any other read
whose shard nobody fetches yet (a cold start, a resume) is served by coalesced byte-range requests while the shard
downloads in the background (format 2 caches, whose records carry their own checksums; older formats wait for the
shard). A read of a format 2 cache that waits for a download takes the shard's bytes before the download's sync,
SHA-256 and rename (``_arrivals``; its records are checked as every read's): as they come when the download is
its own process's, once they are all written when it is another process's of the node (a loading process
waiting for its parent's: ``nodecache._whole_files``).
``read_mode="ranges"`` always reads by ranges and keeps no shard copy.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch_drt._cpu_budget import in_loading_process
from torch_drt._stage_clock import count_bytes
from torch_drt.locations._arrivals import arrivals
from torch_drt.locations._manifest_names import manifest_name
from torch_drt.locations._open_reads import OpenReads
from torch_drt.locations._remote_file import RemoteFile, damaged_again, downloadable, keep_mapped_only, verify_download
from torch_drt.locations._remote_gather import gather
from torch_drt.locations.base import CacheBackend, StoredFile
from torch_drt.locations.errors import CacheCorruptError, MissingFile
from torch_drt.locations.location import ANY_URL, Location, register_backend
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.locations.remote_store import RemoteFileMissing, RemoteStore
from torch_drt.nodecache import _warm_start
from torch_drt.nodecache.node_cache import NodeCache
from torch_drt.nodecache.prefetch import ShardPrefetcher

_MANIFESTS = frozenset({"manifest.json", "cacheset.json"})
_INDEX = "index.bin"


class RemoteBackend(CacheBackend):
    """A cache at an fsspec URL (``s3://``, ``gs://``, ``az://``, ``abfs://``, ``http(s)://``, ``memory://``, ...).

    Args:
        location: the cache's URL (no credentials, query or fragment in it).
        storage_options: fsspec options: credentials, ``client_kwargs={"endpoint_url": ...}``; never shown.
        config: node cache, prefetch, read mode, time-outs and retries (default ``RemoteConfig()``).
    """

    stats_cheaply = False

    def __init__(
        self, location: str, storage_options: Mapping[str, Any] | None = None, config: RemoteConfig | None = None
    ) -> None:
        self.storage_options = dict(storage_options or {})
        self.config = config or RemoteConfig()
        self.store = RemoteStore(location, self.storage_options, self.config)
        self._local: tuple[int, NodeCache, ShardPrefetcher] | None = None  # this process's, resolved once
        self._open_reads = OpenReads()  # what the next manifest read may fetch with it
        super().__init__(self.store.url)

    @classmethod
    def from_location(cls, location: Location) -> RemoteBackend:
        return cls(location.url, location.storage_options, location.remote_config)

    def __reduce__(self):
        return (type(self), (self.location, self.storage_options, self.config))

    def __repr__(self) -> str:
        return f"RemoteBackend({self.location!r}, options={sorted(self.storage_options)})"

    @property
    def node(self) -> NodeCache:
        """The node cache this process shares with the node's others (its directory and limit are resolved on
        first use in each process)."""
        return self._resolved()[1]

    @property
    def prefetcher(self) -> ShardPrefetcher:
        """This process's prefetcher."""
        return self._resolved()[2]

    def _resolved(self) -> tuple[int, NodeCache, ShardPrefetcher]:
        local = self._local
        if local is None or local[0] != os.getpid():
            config = self.config
            node = NodeCache.shared(config.node_cache_dir(), config.node_cache_limit(), config.shared_node_cache,
                                    config.lock_wait)
            local = self._local = (os.getpid(), node, ShardPrefetcher.shared(config.prefetch_shards,
                                                                             config.bytes_ahead()))
        return local

    def where(self, rel: str = "") -> str:
        return self.store.join(rel)

    def prefetch(self, files: Sequence[StoredFile], first: int = 0, share: int = 1) -> None:
        """Hand the shards the next reads need, in order, to this process's prefetcher (shards mode only); the
        shards this process maps that no planned read needs are unmapped. The first ``first`` files are what the
        next read needs after a start or a resume (see ``ShardPrefetcher.update``); the prefetcher looks
        ``RemoteConfig.bytes_ahead(share)`` ahead (``share``: the node's processes planning reads)."""
        if self.config.read_mode == "shards":
            planned, needed = downloadable(files, first)
            keep_mapped_only({f.key for f in planned})
            self.prefetcher.update(planned, first=needed, bytes_ahead=self.config.bytes_ahead(share),
                                   hold=in_loading_process())

    def fetch_first(self, files: Sequence[StoredFile], first: int | None = None) -> None:
        """Start downloading ``files`` in this process now, in order (shards mode only), for the first reads of
        the loading processes it is about to start (see ``torch_drt.nodecache._warm_start``: a fork waits for
        their requests to go out); at most ``prefetch_shards`` at once, only what fits under the node cache's
        limit now. The requests of the files after the first ``first`` (the first batch's; None: all) wait until
        those ended."""
        if self.config.read_mode == "shards":
            planned, leading = downloadable(files, len(files) if first is None else first)
            _warm_start.fetch_now(planned, self.config.prefetch_shards, leading)

    def expect(self, rels: Sequence[str]) -> None:
        self._open_reads.expect(rels)

    def check_root(self) -> None:
        """Nothing to check without a request: a location without a manifest is reported by the manifest read."""

    def names(self) -> list[str]:
        return sorted(name for name in self.store.list() if "/" not in name)

    def is_dir(self) -> bool:
        return bool(self.store.run("checking", "", lambda: self.store.fs.isdir(self.store.path(""))))

    def _missing(self, rel: str) -> MissingFile:
        return MissingFile(self.where(rel), "file is missing")

    def _run(self, fn, rel: str):
        try:
            return fn()
        except RemoteFileMissing as e:
            error = self._missing(e.rel)
        except FileNotFoundError:
            error = self._missing(rel)
        raise error

    def size(self, rel: str) -> int:
        path = self.store.path(rel)
        return int(self._run(lambda: self.store.run("sizing", rel, lambda: self.store.fs.size(path)), rel))

    def read(self, rel: str, limit: int, *, checksum: tuple[str, str] | None = None) -> bytes:
        """A manifest through the node's short-lived copy; a file with a ``checksum`` through the node cache."""
        if checksum is None or not checksum[1]:
            data = self._small(rel, limit)
        else:
            data = self._through_node(rel, limit, checksum)
        if len(data) > limit:
            raise CacheCorruptError(self.where(rel), f"file is more than the {limit} bytes allowed")
        return data

    def _through_node(self, rel: str, limit: int, checksum: tuple[str, str]) -> bytes:
        """A content-addressed file read from its node-cache copy, verified as read: a copy damaged since it was
        verified is removed and fetched anew, once.

        Raises:
            CacheCorruptError: naming the local copy when it is damaged again after that.
        """
        key, where, replaced = f"{checksum[0]}-{checksum[1]}", self.where(rel), False
        for _ in range(3):  # evicted between the fetch and the read: fetch again
            self.node.fetch(key, None, lambda fd: _write_all(fd, self._guessed(rel, checksum) or
                                                             self._fetch_whole(rel, limit)),
                            lambda path: verify_download(path, checksum, where), where)
            path = self.node.path(key)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                verify_download(data, checksum, path)
                return data
            except CacheCorruptError as e:
                if replaced:
                    raise damaged_again(path, where, e.reason) from None
                replaced = True
                self.node.discard(key)
        raise CacheCorruptError(where, "the node cache lost the file three times in a row")

    def _fetch_whole(self, rel: str, limit: int) -> bytes:
        return self._run(lambda: self.store.read(rel, limit), rel)

    def _small_name(self, rel: str) -> str:
        """The node cache's name for the copy of manifest ``rel`` (``_manifest_names``)."""
        return manifest_name(self.where(rel), self.storage_options, self.store.scheme)

    def _small(self, rel: str, limit: int) -> bytes:
        """A manifest: read by one process of the node, reused by the others for ``manifest_ttl`` seconds."""
        if rel not in _MANIFESTS:
            return self._fetch_whole(rel, limit)
        name, also = self._small_name(rel), self._open_reads.take_expected()

        def fetch() -> bytes | None:
            if also and not self.node.seen_small(name):  # a node that read it before holds what follows it
                return self._open_reads.fetch_with(self.store, rel, limit, also, self.node)
            return self.store.read_or_none(rel, limit)

        data = self.node.small(name, self.config.manifest_ttl, fetch, self.where(rel))
        if data is None:
            raise self._missing(rel)
        return data

    def _guessed(self, rel: str, checksum: tuple[str, str]) -> bytes | None:
        return self._open_reads.take(rel, checksum, self.where(rel))

    def forget(self, rel: str) -> None:
        """Drop the node's copy of a manifest (after publishing, say)."""
        self.node.forget(self._small_name(rel))

    def open(
        self, rel: str, size: int, *, checksum: tuple[str, str] | None = None, ranges_ok: bool = False
    ) -> RemoteFile:
        """Open lazily: nothing is fetched until a read (the index, which every read needs, is fetched now).

        Raises:
            CacheCorruptError: when a file that must be downloaded has no checksum in the manifest.
        """
        if checksum is None or not checksum[1]:
            if not ranges_ok:
                raise CacheCorruptError(self.where(rel), "the manifest records no checksum to verify a download by")
            checksum = ("ranges", hashlib.sha256(self.where(rel).encode()).hexdigest())
        file = RemoteFile(self, rel, size, checksum, ranges_ok)
        if rel == _INDEX:
            file.keep()  # mapped for the reader's life
        return file

    def sha256(self, rel: str) -> str:
        """Stream the remote file through SHA-256 (nothing is stored)."""
        size, h, chunk = self.size(rel), hashlib.sha256(), self.config.chunk_bytes
        starts = list(range(0, size, chunk))
        for g in range(0, len(starts), 4):
            group = starts[g : g + 4]
            for data in self.ranges([rel] * len(group), group, [min(s + chunk, size) for s in group]):
                h.update(data)
        return h.hexdigest()

    def download(self, rel: str, fd: int, size: int, checksum: tuple[str, str] | None = None,
                 requested: Callable[[], None] | None = None) -> None:
        """Write a remote file's bytes into ``fd`` (for the node cache); with its ``checksum``, the copy fetched
        with the manifest when it is that file, and the bytes of a file fetched in one request are also posted to
        the reads of this process waiting for it (``_arrivals``: before the sync, SHA-256 and rename).
        ``requested()`` is called just before the first request goes out (or once the bytes are in hand)."""
        guess = None if checksum is None else self._guessed(rel, checksum)
        if requested is not None:
            requested()
        if guess is not None and len(guess) == size:
            _write_all(fd, guess)
            count_bytes("download", size)
            return
        try:
            if checksum is not None and self.config.handed_whole(size):  # one request: its bytes are posted
                data = self._run(lambda: self.store.read_range(rel, 0, size), rel)
                if len(data) != size:
                    raise EOFError(rel)
                arrivals().post(f"{checksum[0]}-{checksum[1]}", data)  # for this process's reads waiting for it
                _write_all(fd, data)
            else:
                self._run(lambda: self.store.download(rel, fd, size), rel)
            count_bytes("download", size)
        except EOFError:
            error = CacheCorruptError(self.where(rel), f"file is shorter than the {size} bytes the manifest records")
            raise error from None

    def ranges(self, rels: Sequence[str], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` of ``rels[i]`` by range requests, each checked to be whole."""
        data = self._run(lambda: self.store.read_ranges(rels, starts, ends), rels[0] if rels else "")
        count_bytes("range_read", sum(len(d) for d in data))
        for rel, a, b, d in zip(rels, starts, ends, data):
            if len(d) != b - a:
                raise CacheCorruptError(self.where(rel), f"file ends before byte {b} (shorter than the manifest says)")
        return data

    def gather(
        self, files: Sequence[StoredFile], numbers: Sequence[int], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Local shards are sliced; the others are read with coalesced ranges while they download (or, without
        record checksums, once downloaded). The shards a read waits for download at once, not one by one."""
        return gather(self, files, numbers, starts, ends)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


register_backend(ANY_URL, RemoteBackend)  # fsspec reads every scheme it knows
