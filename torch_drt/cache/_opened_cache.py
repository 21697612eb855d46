"""One open cache as the reader sees it: its index, shards and record checks; gather, verify, decompress.

``CacheReader`` (``reader.py``) holds one per cache and routes each read to it; see that module for the read path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_drt._distinct import distinct
from torch_drt.cache._compression import decompressor
from torch_drt.cache._legacy import payload_index
from torch_drt.cache._verified import VerifiedRecords
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import CacheLayout, backend_of
from torch_drt.cache.validate import load_index, open_shards
from torch_drt.checksums import copied_checksums, first_mismatch
from torch_drt.locations import StoredFile


class OpenedCache:
    """One cache's opened files and index, and the gather over them."""

    def __init__(self, layout: CacheLayout, record_checks: str = "every_read") -> None:
        self.layout = layout
        self.backend = backend_of(layout)
        self.shards = open_shards(layout)
        self.index_file: StoredFile | None
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

    def _mismatch(self, entries: np.ndarray, sample_ids: np.ndarray, i: int) -> CacheCorruptError:
        return self._fail(
            int(entries["shard"][i]), int(sample_ids[i]), "record fails its checksum (damaged shard or index)"
        )

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
        shards = distinct(self.index["shard"][sample_ids]).tolist()
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
        if self.checksum is not None and self.verified is None:  # every read: each part hashed as it is copied
            part = self.backend.gather_parts(self.shards, entries["shard"].tolist(), starts, ends)
            nbytes = int(entries["length"].sum()) if len(starts) > 1 else 0  # one record is one part (get_item)
            data, i = copied_checksums(part, len(starts), nbytes, entries["checksum"])
            if i >= 0:
                raise self._mismatch(entries, sample_ids, i)
        elif len(self.shards) == 1:
            self.shards[0].check()
            data = self.shards[0].gather(starts, ends)
        else:
            data = self.backend.gather(self.shards, entries["shard"].tolist(), starts, ends)
        if self.checksum is not None and self.verified is not None:
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
        i = first_mismatch(data, entries["checksum"])
        if i >= 0:
            raise self._mismatch(entries, sample_ids, i)
        if verified is not None:
            verified.mark(sample_ids)

    def _decompress(self, data: list[bytes], entries: np.ndarray, sample_ids: np.ndarray) -> list[bytes]:
        decompress = self.decompress
        assert decompress is not None  # called only with a decompressor (_gather)
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
        for shard_no in distinct(entries["shard"]).tolist():
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
