"""RemoteConfig: how caches at URLs are read and written (node cache, prefetch, ranges, retries, publishing)."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CACHE_DIR_ENV = "TORCH_DRT_NODE_CACHE"
CACHE_LIMIT_ENV = "TORCH_DRT_NODE_CACHE_BYTES"
_MIB = 1 << 20


def _positive(name: str, value: object, *, integer: bool = True, zero: bool = False) -> None:
    kind = int if integer else (int, float)
    if (  # one condition (not a variable): mypy narrows value to a number for the comparisons
        not (isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value))
        or value < 0
        or (value == 0 and not zero)
    ):
        raise ValueError(f"{name}={value!r} must be a{'n int' if integer else ' number'} {'>=' if zero else '>'} 0")


@dataclass(frozen=True)
class RemoteConfig:
    """Settings for caches at URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``memory://``, ...).

    Every process and rank of a node that uses the same ``cache_dir`` shares one node cache: a shard is
    downloaded once per node, verified against the manifest's SHA-256 and evicted least-recently-used first
    once the cache holds more than ``cache_limit`` bytes. See ``docs/remote-caches.md``.

    Args:
        cache_dir: the node-local cache directory (default: ``$TORCH_DRT_NODE_CACHE``, else
            ``<tempdir>/torch_drt-node-cache-<uid>``). Use a local disk: file locks coordinate its users.
        cache_limit: bytes the node cache may hold (default: ``$TORCH_DRT_NODE_CACHE_BYTES``, else half the size of
            the file system holding ``cache_dir``). Its files (verified and downloading) stay within it plus the
            files reads hold at that moment (a shard while a read copies records out of it; the index of each
            open cache) and the downloads reads wait for: idle maps and prefetches hold nothing over it (see
            ``docs/remote-caches.md``). A file larger than the limit is a ``ValueError``.
        read_mode: ``"shards"`` downloads whole shards into the node cache (a read that misses is served by
            byte ranges while its shard downloads); ``"ranges"`` reads every batch with coalesced byte-range
            requests and keeps no shard copy (for sparse or weighted sampling).
        prefetch_shards: shard downloads in flight per process.
        prefetch_bytes: bytes of future shards a process fetches ahead (capped at a quarter of ``cache_limit``,
            split among the node's processes that plan reads: each rank's loading processes times the local ranks).
        lookahead_batches: future batches a loader looks at to find the shards to fetch.
        open_shards: idle shards a process keeps mapped, one map per file for all its datasets (an idle map does
            not keep its file from eviction: a read finding it evicted fetches it again).
        chunk_bytes: size of the byte-range requests one shard download is split into.
        range_gap: ranges closer than this are fetched in one request.
        range_max: the largest request coalescing may build.
        ranges_in_flight: byte-range requests in flight at once.
        timeout: seconds a request may wait for data before it fails (and is retried).
        connect_timeout: seconds to open a connection.
        retries: further attempts after a transient failure (``torch_drt.sources.retry``).
        backoff: base wait before a retry, in seconds (doubling, with jitter).
        max_backoff: longest wait before a retry.
        lock_wait: seconds a process waits for another's lock on a node-cache file (a download, the space
            accounting, a manifest copy) before it goes on without it, downloading the file itself, and logs the
            holder's pid (a stopped or hung process does not block the node).
        manifest_ttl: seconds a fetched manifest is reused by the node's processes before it is fetched again.
        upload_concurrency: files uploaded at once when publishing to a URL.
        stale_writer_after: seconds without a heartbeat after which another writer's claim on a cache name is
            considered abandoned (its partial upload is then removed by the next writer).
        conditional_writes: whether the store refuses to overwrite an object on request (S3's ``If-None-Match``);
            None decides by scheme (``s3`` and ``memory``: yes). Without them a writer claims a name by writing
            then re-reading its claim after ``claim_settle`` seconds.
        claim_settle: seconds between writing a claim and checking it on stores without conditional writes.
        staging_dir: where caches to publish at a URL are written first (default: the system temp directory).
        shared_node_cache: share the node cache with the users of its directory's group, on purpose (directories
            ``2770``, files ``0660``; the directory may belong to another user of the group). By default the node
            cache is private: ``0700``, owned by this user, and a directory found that another user owns (or
            may write) is refused.
        allow_foreign_parts: read the parts of a remote cache set that lie at another origin (scheme, host or
            bucket) than the set itself. By default they are refused: the set's ``storage_options`` (its
            credentials) are never sent where a downloaded ``cacheset.json`` points.
    """

    cache_dir: str | None = None
    cache_limit: int | None = None
    read_mode: Literal["shards", "ranges"] = "shards"
    prefetch_shards: int = 4
    prefetch_bytes: int = 1 << 30
    lookahead_batches: int = 64
    open_shards: int = 8
    chunk_bytes: int = 8 * _MIB
    range_gap: int = 256 * 1024
    range_max: int = 16 * _MIB
    ranges_in_flight: int = 32
    timeout: float = 60.0
    connect_timeout: float = 10.0
    retries: int = 5
    backoff: float = 0.2
    max_backoff: float = 10.0
    manifest_ttl: float = 60.0
    lock_wait: float = 60.0
    upload_concurrency: int = 8
    stale_writer_after: float = 3600.0
    conditional_writes: bool | None = None
    claim_settle: float = 1.0
    staging_dir: str | None = None
    shared_node_cache: bool = False
    allow_foreign_parts: bool = False

    def __post_init__(self) -> None:
        if self.read_mode not in ("shards", "ranges"):
            raise ValueError(f"read_mode={self.read_mode!r} must be 'shards' or 'ranges'")
        for name in ("prefetch_shards", "lookahead_batches", "open_shards", "chunk_bytes", "range_max",
                     "ranges_in_flight", "upload_concurrency", "prefetch_bytes"):
            _positive(name, getattr(self, name))
        for name in ("timeout", "connect_timeout", "lock_wait"):
            _positive(name, getattr(self, name), integer=False)
        for name in ("backoff", "max_backoff", "manifest_ttl", "stale_writer_after", "claim_settle"):
            _positive(name, getattr(self, name), integer=False, zero=True)
        _positive("range_gap", self.range_gap, zero=True)
        _positive("retries", self.retries, zero=True)
        if self.cache_limit is not None:
            _positive("cache_limit", self.cache_limit)
        for name in ("shared_node_cache", "allow_foreign_parts"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a bool")
        if self.conditional_writes not in (None, True, False):
            raise ValueError(f"conditional_writes={self.conditional_writes!r} must be None, True or False")

    def handed_whole(self, size: int) -> bool:
        """Whether a downloading file of ``size`` bytes is handed whole to the reads waiting for it before its
        download ends (posted by this process's download, or read from another process's once all its bytes are
        written): files of at most ``chunk_bytes``, so that a hand-off holds no more in memory than one request."""
        return 0 < size <= self.chunk_bytes

    def node_cache_dir(self) -> Path:
        """The node cache directory in force (argument, environment, or the default under the temp directory)."""
        chosen = self.cache_dir or os.environ.get(CACHE_DIR_ENV)
        if chosen:
            return Path(chosen)
        return Path(tempfile.gettempdir()) / f"torch_drt-node-cache-{os.getuid()}"

    def node_cache_limit(self) -> int:
        """The node cache's byte limit in force (argument, environment, or half the file system's size)."""
        if self.cache_limit is not None:
            return self.cache_limit
        env = os.environ.get(CACHE_LIMIT_ENV)
        if env:
            try:
                value = int(env)
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"{CACHE_LIMIT_ENV}={env!r} must be an int > 0 (bytes)")
            return value
        directory = self.node_cache_dir()
        probe = next((p for p in (directory, *directory.parents) if p.exists()), Path("/"))
        return shutil.disk_usage(probe).total // 2

    def bytes_ahead(self, share: int = 1) -> int:
        """Bytes a process prefetches ahead: ``prefetch_bytes``, at most a quarter of the node cache split among
        the node's ``share`` processes that plan reads (``torch_drt._cpu_budget.node_processes``: their windows add
        up in the node cache: beyond a quarter, downloads for the windows evict the shards the next reads find
        there)."""
        return max(1, min(self.prefetch_bytes, self.node_cache_limit() // (4 * max(1, share))))
