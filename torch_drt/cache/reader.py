"""The one read path of every cache reader: locate, gather, verify, decompress.

``CachedDataset`` iteration, the cache loader's consumers, ``CacheReaderNode`` and ``DocumentStorage`` all read
through ``CacheReader``; where the bytes come from is the cache's backend (``torch_drt.locations``).

For each gather, per cache: the rows' index entries are looked up; every file read from is checked for its
size (a truncated shard is an error, not a SIGBUS); the records are copied out; in format 2 each record's
XXH3-64 is compared with its index entry before anything else looks at it (with ``record_checks="first_read"``,
only on a record's first read in the process: see ``CacheReader``); then records are decompressed
within the cache's ``max_record_bytes``. Any failure is a ``CacheCorruptError`` naming the shard and sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_drt.cache._compression import decompressor
from torch_drt.cache._legacy import payload_index
from torch_drt.cache._verified import RECORD_CHECKS, VerifiedRecords
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import CacheLayout
from torch_drt.cache.validate import load_index, open_cache, open_layout, open_shards
from torch_drt.checksums import record_checksums
from torch_drt.describe import described


class _OpenedCache:
    """One cache's opened files and index, and the gather over them."""

    def __init__(self, layout: CacheLayout, record_checks: str = "every_read") -> None:
        self.layout = layout
        self.backend = layout.backend
        self.shards = open_shards(layout)
        self.index_file, self.index = load_index(layout)
        if layout.legacy:  # payload extents are computed once, into private memory
            self.index = payload_index(layout, self.index, self.shards)
            self.index_file.close()
            self.index_file = None
        self.checksum = self.index["checksum"] if layout.record_checksums else None
        index = self.index  # its entries as rows of bytes: a batch's entries are taken as rows, not field by field
        self._rows = index.view(np.uint8).reshape(len(index), index.itemsize) if index.flags.c_contiguous else None
        once = record_checks == "first_read" and self.checksum is not None and all(f.lasting for f in self.shards)
        self.verified = VerifiedRecords(len(self.index)) if once else None  # local maps only
        self.decompress = decompressor(layout.compression, layout.max_record_bytes)

    def _fail(self, shard: int, sample: int, reason: str) -> CacheCorruptError:
        return CacheCorruptError(self.backend.where(self.layout.shard_path(shard)), f"sample {sample}: {reason}")

    def entries(self, sample_ids: np.ndarray, field: str | None = None) -> np.ndarray:
        """The index entries of ``sample_ids``, or only their ``field`` (the index file is checked first).

        Raises:
            IndexError: for a sample id outside the cache.
        """
        if sample_ids.size and (sample_ids.min() < 0 or sample_ids.max() >= len(self.index)):
            bad = int(sample_ids[(sample_ids < 0) | (sample_ids >= len(self.index))][0])
            raise IndexError(
                f"sample_id {bad} is out of range for cache {self.layout.path} ({len(self.index)} samples)"
            )
        if self.index_file is not None:
            self.index_file.check()
        if field is not None:
            return self.index[field][sample_ids]
        if self._rows is None:
            return self.index[sample_ids]
        return np.take(self._rows, sample_ids, axis=0).view(self.index.dtype).reshape(-1)

    def _again(self, error: CacheCorruptError, sample_ids: np.ndarray) -> None:
        """After a read of ``sample_ids`` failed its checks: let the shards read replace damaged local copies
        (``StoredFile.recheck``); ``error`` stands when none was."""
        if self.backend.stats_cheaply or not sample_ids.size:  # local files: nothing is a copy
            raise error
        shards = np.unique(self.index["shard"][sample_ids]).tolist()
        if not any([self.shards[s].recheck() for s in shards if 0 <= s < len(self.shards)]):
            raise error

    def gather(self, sample_ids: np.ndarray) -> list[bytes]:
        """The verified, decompressed payloads of ``sample_ids``, in order (a damaged local copy of a remote
        shard is fetched anew, once)."""
        try:
            return self._gather(sample_ids)
        except CacheCorruptError as e:
            self._again(e, sample_ids)
        return self._gather(sample_ids)

    def _gather(self, sample_ids: np.ndarray) -> list[bytes]:
        entries = self.entries(sample_ids)
        starts = entries["offset"].tolist()
        ends = (entries["offset"] + entries["length"]).tolist()
        if len(self.shards) == 1:
            self.shards[0].check()
            data = self.shards[0].gather(starts, ends)
        else:
            data = self.backend.gather(self.shards, entries["shard"].tolist(), starts, ends)
        if self.checksum is not None:
            self.verify(data, entries, sample_ids)
        if self.decompress is not None:
            data = self._decompress(data, entries, sample_ids)
        return data

    def verify(self, data: Sequence[bytes | np.ndarray], entries: np.ndarray, sample_ids: np.ndarray) -> None:
        """Compare each record's XXH3-64 with its index entry (format 2); with ``first_read``, only the records
        this process has not verified yet."""
        verified = self.verified
        if verified is not None:
            todo = verified.unchecked(sample_ids)
            if not todo.size:
                return
            if todo.size < len(data):
                data, entries, sample_ids = [data[i] for i in todo.tolist()], entries[todo], sample_ids[todo]
        bad = record_checksums(data, len(data)) != entries["checksum"]
        if bad.any():
            i = int(np.argmax(bad))
            raise self._fail(
                int(entries["shard"][i]), int(sample_ids[i]), "record fails its checksum (damaged shard or index)"
            )
        if verified is not None:
            verified.mark(sample_ids)

    def _decompress(self, data: list[bytes], entries: np.ndarray, sample_ids: np.ndarray) -> list[bytes]:
        decompress = self.decompress
        try:
            return [decompress(d) for d in data]
        except ValueError:
            for i, d in enumerate(data):  # find the record at fault
                try:
                    decompress(d)
                except ValueError as e:
                    raise self._fail(
                        int(entries["shard"][i]), int(sample_ids[i]), f"record cannot be decompressed: {e}"
                    ) from None
            raise

    def gather_into(self, sample_ids: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
        """Copy equal-length, uncompressed payloads of ``sample_ids`` into ``out[rows]``, then verify them (a
        damaged local copy of a remote shard is fetched anew, once)."""
        try:
            return self._gather_into(sample_ids, out, rows)
        except CacheCorruptError as e:
            self._again(e, sample_ids)
        return self._gather_into(sample_ids, out, rows)

    def _gather_into(self, sample_ids: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
        entries = self.entries(sample_ids)
        width = out.shape[1]
        if self.decompress is not None:
            raise ValueError("read_into needs uncompressed caches")
        if np.any(entries["length"] != width):
            raise ValueError(f"payloads differ from the row width {width}")
        for shard_no in np.unique(entries["shard"]).tolist():
            sel = np.nonzero(entries["shard"] == shard_no)[0]
            shard = self.shards[shard_no]
            shard.check()
            view = shard.view()
            starts = entries["offset"][sel].astype(np.int64)
            if view is None:
                for r, d in zip(rows[sel].tolist(), shard.gather(starts.tolist(), (starts + width).tolist())):
                    out[r] = np.frombuffer(d, dtype=np.uint8)
                continue
            body = np.frombuffer(view, dtype=np.uint8)
            if sel.size > 1 and np.all(np.diff(starts) == width):  # contiguous run: one slice
                out[rows[sel]] = body[starts[0] : starts[0] + width * sel.size].reshape(-1, width)
            else:
                for r, s in zip(rows[sel].tolist(), starts.tolist()):
                    out[r] = body[s : s + width]
        if self.checksum is not None:
            self.verify(out[rows], entries, sample_ids)

    def close(self) -> None:
        for file in self.shards:
            file.close()
        if self.index_file is not None:
            self.index_file.close()


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
        self._caches = [_OpenedCache(layout, record_checks) for layout in self.layouts]
        self._offsets = np.concatenate([[0], np.cumsum([len(lay.shards) for lay in self.layouts])]).astype(np.int64)

    @classmethod
    def open(cls, paths: Sequence[str | Path], verify: bool = False, record_checks: str = "every_read") -> CacheReader:
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
        for pos in np.unique(cache_pos).tolist():
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
        for pos in np.unique(cache_pos).tolist() if len(self._caches) > 1 else [0]:
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
        for pos in np.unique(cache_pos).tolist():
            rows = np.nonzero(cache_pos == pos)[0]
            out[rows] = self._caches[pos].entries(sample_ids[rows], "shard").astype(np.int64) + self._offsets[pos]
        return out

    def prefetch(self, groups: np.ndarray, first: int = 0) -> None:
        """Fetch the shards numbered ``groups`` (as ``shard_groups`` numbers them) ahead of the reads that need
        them, in this order; it replaces the previous call's plan. A no-op when every cache is local. After a start
        or a resume, ``first`` says how many of ``groups`` (distinct) the next read needs: they download first.

        This is the loader's hook: give it the shards of the next batches before reading each batch (see
        ``torch_drt.cache.read_ahead.ReadAhead``). The first remote cache's ``RemoteConfig`` bounds the prefetch.
        """
        remote = [c for c in self._caches if not c.backend.stats_cheaply]
        if not remote:
            return
        groups = np.asarray(groups, dtype=np.int64)
        pos = np.searchsorted(self._offsets, groups, side="right") - 1
        files = [self._caches[p].shards[g - self._offsets[p]] for p, g in zip(pos.tolist(), groups.tolist())]
        remote[0].backend.prefetch(files, first)

    def close(self) -> None:
        """Unmap every file (payloads already returned stay valid: they are copies)."""
        for cache in self._caches:
            cache.close()

    def __repr__(self) -> str:
        return described(self, caches=len(self.layouts), shards=int(self._offsets[-1]))
