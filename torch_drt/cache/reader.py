"""The one read path of every cache reader: locate, gather, verify, decompress.

``CachedDataset`` iteration, the cache loader's consumers, ``CacheReaderNode`` and ``DocumentStorage`` all read
through ``CacheReader``; where the bytes come from is the cache's backend (``torch_drt.locations``).

For each gather, per cache: the rows' index entries are looked up; every file read from is checked for its
size (a truncated shard is an error, not a SIGBUS); the records are copied out; in format 2 each record's
XXH3-64 is compared with its index entry before anything else looks at it (a gather is copied and hashed about
1 MiB at a time, each part while it is in the CPU's cache; with ``record_checks="first_read"``, only on a
record's first read in the process: see ``CacheReader``); then records are decompressed
within the cache's ``max_record_bytes``. Any failure is a ``CacheCorruptError`` naming the shard and sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from torch_drt._distinct import distinct
from torch_drt.cache._opened_cache import OpenedCache
from torch_drt.cache._verified import RECORD_CHECKS
from torch_drt.cache.layout import CacheLayout
from torch_drt.cache.validate import open_cache, open_layout
from torch_drt.describe import described
from torch_drt.locations.base import CacheBackend, StoredFile

if TYPE_CHECKING:
    from torch_drt.locations.remote import RemoteBackend


class CacheReader:
    """Random access to the payloads of one or more validated caches.

    Local shards and index files are mapped read-only, so processes reading the same cache share their pages.
    A reader pickles as its layouts and reopens the files on the other side (worker processes under spawn,
    fork or forkserver), checking the index again there.

    What is checked when (format 2: an XXH3-64 per record): at every gather, the size of each file read from (a
    truncated file is a ``CacheCorruptError``, not a SIGBUS); with ``record_checks="every_read"`` (the default),
    every record's hash before its bytes are returned. With ``"first_read"``, a record of a local cache is hashed
    before its bytes are first returned in this process (a forked child keeps what its parent verified: same
    mappings); later reads copy the same mapped bytes unhashed. That holds while shard files do not change in
    place: a published shard is never rewritten, a replaced or deleted file leaves this process's map of the old
    one intact, a truncated one fails the size check. Not caught after a record's first read: a shard rewritten
    in place by another program, or storage returning other bytes when evicted pages are read again (use
    ``"every_read"`` where either can happen). Caches at URLs are checked on every read.

    Args:
        layouts: the caches, as returned by ``open_cache``; their order defines cache positions.
        record_checks: ``"every_read"`` or ``"first_read"`` (see above).
    """

    def __init__(self, layouts: Sequence[CacheLayout], record_checks: str = "every_read") -> None:
        if record_checks not in RECORD_CHECKS:
            raise ValueError(f"{record_checks=} must be one of {RECORD_CHECKS}")
        self.layouts = tuple(layouts)
        self.record_checks = record_checks
        self._caches = [OpenedCache(layout, record_checks) for layout in self.layouts]
        self._offsets = np.concatenate([[0], np.cumsum([len(lay.shards) for lay in self.layouts])]).astype(np.int64)

    @classmethod
    def open(
        cls, paths: Sequence[str | Path | CacheBackend], verify: bool = False, record_checks: str = "every_read"
    ) -> CacheReader:
        """Open the caches at ``paths`` for reading payloads.

        The manifest, the shards' sizes and the index are checked as at every open; the metadata table, which
        a reader does not use, is checked only with ``verify`` (then with every SHA-256, as ``open_cache``).
        """
        return cls([open_cache(p, verify=True) if verify else open_layout(p) for p in paths], record_checks)

    def __reduce__(self):
        return (CacheReader, (self.layouts, self.record_checks))

    def __len__(self) -> int:
        return len(self.layouts)

    def read(self, cache_pos: int, sample_id: int) -> bytes:
        """Return one payload."""
        return self._caches[cache_pos].gather(np.array([sample_id], dtype=np.int64))[0]

    def read_many(self, cache_pos: np.ndarray, sample_ids: np.ndarray) -> list[bytes]:
        """Return the payloads of rows (``cache_pos[i]``, ``sample_ids[i]``) in order, one gather per cache."""
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        if len(self._caches) == 1:
            return self._caches[0].gather(sample_ids)
        cache_pos = np.asarray(cache_pos)
        out: list[bytes] = [b""] * len(sample_ids)
        for pos in distinct(cache_pos).tolist():
            rows = np.nonzero(cache_pos == pos)[0]
            for row, data in zip(rows.tolist(), self._caches[pos].gather(sample_ids[rows])):
                out[row] = data
        return out

    def read_into(self, cache_pos: np.ndarray, sample_ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Copy equal-length, uncompressed payloads straight into the rows of a 2-D uint8 array, verified.

        Raises:
            ValueError: when a payload's length differs from ``out.shape[1]`` or the cache is compressed.
            CacheCorruptError: when a record fails its checksum.
        """
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        cache_pos = np.asarray(cache_pos)
        for pos in distinct(cache_pos).tolist() if len(self._caches) > 1 else [0]:
            rows = np.nonzero(cache_pos == pos)[0] if len(self._caches) > 1 else np.arange(len(sample_ids))
            self._caches[pos].gather_into(sample_ids[rows], out, rows)
        return out

    @property
    def remote(self) -> bool:
        """True when a cache is read from a URL (its shards can be fetched ahead: see ``prefetch``)."""
        return any(not c.backend.stats_cheaply for c in self._caches)

    @property
    def lookahead_batches(self) -> int:
        """Batches a loader should look ahead for prefetching (the first remote cache's setting; 0 when local)."""
        configs = [getattr(c.backend, "config", None) for c in self._caches if not c.backend.stats_cheaply]
        return configs[0].lookahead_batches if configs and configs[0] is not None else 0

    def shard_groups(self, cache_pos: np.ndarray, sample_ids: np.ndarray) -> np.ndarray:
        """The shard of each row as one number across this reader's caches (cache offset + shard number).

        Raises:
            IndexError: for a sample id outside its cache.
        """
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        if len(self._caches) == 1:
            return self._caches[0].entries(sample_ids, "shard").astype(np.int64)
        cache_pos = np.asarray(cache_pos)
        out = np.empty(len(sample_ids), dtype=np.int64)
        for pos in distinct(cache_pos).tolist():
            rows = np.nonzero(cache_pos == pos)[0]
            out[rows] = self._caches[pos].entries(sample_ids[rows], "shard").astype(np.int64) + self._offsets[pos]
        return out

    def prefetch(self, groups: np.ndarray, first: int = 0, share: int = 1) -> None:
        """Fetch the shards numbered ``groups`` (as ``shard_groups`` numbers them) ahead of the reads that need
        them, in this order; it replaces the previous call's plan. A no-op when every cache is local. After a start
        or a resume, ``first`` says how many of ``groups`` (distinct) the next read needs: they download first.
        ``share``: the node's processes planning reads (``torch_drt._cpu_budget.node_processes``: their prefetch
        windows split the node cache's quarter).

        This is the loader's hook: give it the shards of the next batches before reading each batch (see
        ``torch_drt.cache.read_ahead.ReadAhead``). The first remote cache's ``RemoteConfig`` bounds the prefetch.
        """
        remote = [c for c in self._caches if not c.backend.stats_cheaply]
        if remote:
            remote[0].backend.prefetch(self._shard_files(groups), first, share)

    def fetch_first(self, groups: np.ndarray, first: int | None = None) -> None:
        """Start downloading the shards numbered ``groups`` in this process now, in this order, for the first reads
        of the loading processes it starts (``RemoteBackend.fetch_first``: the requests of the shards after the
        first ``first``, the first batch's, wait until those ended); a no-op when every cache is local. The plan of
        ``prefetch`` stays as it is."""
        remote = [c for c in self._caches if not c.backend.stats_cheaply]
        if remote:
            # only the remote backend is not stats_cheaply (the base class has no fetch_first)
            cast("RemoteBackend", remote[0].backend).fetch_first(self._shard_files(groups), first)

    def _shard_files(self, groups: np.ndarray) -> list[StoredFile]:
        """The shard files numbered ``groups`` (as ``shard_groups`` numbers them), in this order."""
        groups = np.asarray(groups, dtype=np.int64)
        pos = np.searchsorted(self._offsets, groups, side="right") - 1
        return [self._caches[p].shards[g - self._offsets[p]] for p, g in zip(pos.tolist(), groups.tolist())]

    def close(self) -> None:
        """Unmap every file (payloads already returned stay valid: they are copies)."""
        for cache in self._caches:
            cache.close()

    def __repr__(self) -> str:
        return described(self, caches=len(self.layouts), shards=int(self._offsets[-1]))
