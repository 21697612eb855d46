"""Reading payloads: shards and index files are memory-mapped, rows are gathered a batch at a time."""

from __future__ import annotations

import mmap
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_drt.cache._compression import decompressor
from torch_drt.cache._format import SHARD_DIR
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.validate import CacheLayout, open_cache, read_index

__all__ = ["CacheReader"]

_LEGACY_HEADER = 8  # dataset-rt records start with a u64 length of their JSON metadata


def _map_file(path: Path) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _legacy_payload_index(layout: CacheLayout, shards: list[mmap.mmap]) -> np.ndarray:
    """Turn dataset-rt record extents into payload extents by reading each record's JSON length."""
    index = np.array(read_index(layout))
    out = index.copy()
    for shard_no, mm in enumerate(shards):
        rows = np.nonzero(index["shard"] == shard_no)[0]
        if rows.size == 0:
            continue
        body = np.frombuffer(mm, dtype=np.uint8)
        starts = index["offset"][rows].astype(np.int64)
        header = body[starts[:, None] + np.arange(_LEGACY_HEADER)].copy().view("<u8").ravel()
        skip = header + _LEGACY_HEADER
        if np.any(skip > index["length"][rows]):
            raise CacheCorruptError(layout.path / SHARD_DIR, "a record's metadata header overruns the record")
        out["offset"][rows] = index["offset"][rows] + skip
        out["length"][rows] = index["length"][rows] - skip
    return out


class CacheReader:
    """Random access to the payloads of one or more validated caches.

    Shard files and (for torch_drt caches) index files are mapped read-only, so processes reading the same
    cache share their pages. A reader pickles as its cache paths and is rebuilt from them on the other side,
    so it can be sent to worker processes under spawn, fork or forkserver.

    Args:
        layouts: the caches, as returned by ``open_cache``; their order defines cache positions.
    """

    def __init__(self, layouts: Sequence[CacheLayout]) -> None:
        self.layouts = tuple(layouts)
        self._shards: list[list[mmap.mmap]] = []
        self._index: list[np.ndarray] = []
        self._algos = [layout.compression for layout in self.layouts]
        self._local = threading.local()
        for layout in self.layouts:
            shards = [_map_file(layout.path / SHARD_DIR / name) for name, _ in layout.shards]
            self._shards.append(shards)
            self._index.append(_legacy_payload_index(layout, shards) if layout.legacy else read_index(layout))

    @classmethod
    def open(cls, paths: Sequence[str | Path], verify: bool = False) -> CacheReader:
        """Validate and open the caches at ``paths``."""
        return cls([open_cache(p, verify=verify) for p in paths])

    def __reduce__(self):
        return (CacheReader.open, ([str(layout.path) for layout in self.layouts],))

    def __len__(self) -> int:
        return len(self.layouts)

    def _decompress(self, cache_pos: int):
        algo = self._algos[cache_pos]
        if algo == "none":
            return None
        cache = self._local.__dict__.setdefault("codecs", {})
        if algo not in cache:
            cache[algo] = decompressor(algo)
        return cache[algo]

    def entries(self, cache_pos: int, sample_ids: np.ndarray) -> np.ndarray:
        """Return the (shard, offset, length) index entries of ``sample_ids`` in cache ``cache_pos``."""
        return self._index[cache_pos][sample_ids]

    def read(self, cache_pos: int, sample_id: int) -> bytes:
        """Return one payload."""
        shard, offset, length = (int(x) for x in self._index[cache_pos][sample_id])
        data = self._shards[cache_pos][shard][offset : offset + length]
        decompress = self._decompress(cache_pos)
        return data if decompress is None else decompress(data)

    def read_many(self, cache_pos: np.ndarray, sample_ids: np.ndarray) -> list[bytes]:
        """Return the payloads of rows (``cache_pos[i]``, ``sample_ids[i]``) in order, one gather per cache."""
        n = len(sample_ids)
        if len(self.layouts) == 1:
            return self._read_one_cache(0, sample_ids)
        out: list[bytes] = [b""] * n
        for pos in np.unique(cache_pos):
            rows = np.nonzero(cache_pos == pos)[0]
            for row, data in zip(rows.tolist(), self._read_one_cache(int(pos), sample_ids[rows])):
                out[row] = data
        return out

    def _read_one_cache(self, cache_pos: int, sample_ids: np.ndarray) -> list[bytes]:
        entries = self._index[cache_pos][sample_ids]
        shards = self._shards[cache_pos]
        offsets = entries["offset"].tolist()
        ends = (entries["offset"] + entries["length"]).tolist()
        if len(shards) == 1:
            mm = shards[0]
            out = [mm[a:b] for a, b in zip(offsets, ends)]
        else:
            out = [shards[s][a:b] for s, a, b in zip(entries["shard"].tolist(), offsets, ends)]
        decompress = self._decompress(cache_pos)
        if decompress is not None:
            out = [decompress(d) for d in out]
        return out

    def read_into(self, cache_pos: np.ndarray, sample_ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Copy equal-length, uncompressed payloads straight into the rows of a 2-D uint8 array.

        Raises:
            ValueError: when a payload's length differs from ``out.shape[1]`` or the cache is compressed.
        """
        width = out.shape[1]
        for pos in np.unique(cache_pos) if len(self.layouts) > 1 else [0]:
            rows = np.nonzero(cache_pos == pos)[0] if len(self.layouts) > 1 else np.arange(len(sample_ids))
            if self._algos[int(pos)] != "none":
                raise ValueError("read_into needs uncompressed caches")
            entries = self._index[int(pos)][sample_ids[rows]]
            if np.any(entries["length"] != width):
                raise ValueError(f"payloads differ from the row width {width}")
            shards = self._shards[int(pos)]
            for shard_no in np.unique(entries["shard"]):
                sel = np.nonzero(entries["shard"] == shard_no)[0]
                body = np.frombuffer(shards[int(shard_no)], dtype=np.uint8)
                starts = entries["offset"][sel].astype(np.int64)
                if sel.size > 1 and np.all(np.diff(starts) == width):  # contiguous run: one slice
                    out[rows[sel]] = body[starts[0] : starts[0] + width * sel.size].reshape(-1, width)
                else:
                    for r, s in zip(rows[sel].tolist(), starts.tolist()):
                        out[r] = body[s : s + width]
        return out
