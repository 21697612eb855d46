"""ShardSet: a map-style dataset over the shards of another system's format (the base of every reader here).

A foreign dataset is a list of shards, each with its number of samples; sample ``i`` is sample ``i - start(s)`` of
the shard ``s`` it falls in. A reader says how a shard is decoded (``_load``, once, kept in a small per-process
LRU) and how one sample is taken from the decoded shard (``_sample``). With ``len`` and ``__getitem__`` the set is
an ordinary map-style dataset: ``torch_drt.StatefulDataLoader`` shuffles, splits by rank and worker and resumes
it exactly as any other; ``shard_groups()`` gives the shard of every sample, what the locality-aware permutation
(``torch_drt.sampling.locality.ShardWindowShuffle``) is built from.

A remote reader names each shard's file (``_remote_file``): ``plan_reads`` hands the files of the samples a loader
reads next, in the order it reads them, to the process's prefetcher (``torch_drt.StatefulDataLoader`` calls it in
the process that plans the batches), and a batch's shards that are not local yet are asked for at once.
"""

from __future__ import annotations

import operator
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from torch_drt.formats._files import demand_files, prefetch_files
from torch_drt.locations import StoredFile


class ShardSet(ABC):
    """Samples of a list of shards, read lazily, the last ``cache_shards`` decoded shards kept per process (more
    while they hold at most ``cache_bytes``).

    Args:
        counts: samples in each shard.
        names: each shard's name (its file, and its part of the file), for errors and ``repr``.
        cache_shards: decoded shards kept in this process (>= 1).
        cache_bytes: more decoded shards are kept while the memory they hold (``_nbytes``) adds up to at most
            this (0: ``cache_shards`` only).
    """

    def __init__(
        self, counts: Sequence[int], names: Sequence[str], cache_shards: int = 4, cache_bytes: int = 0
    ) -> None:
        if not isinstance(cache_shards, int) or isinstance(cache_shards, bool) or cache_shards < 1:
            raise ValueError(f"{cache_shards=} must be an int >= 1")
        if not isinstance(cache_bytes, int) or isinstance(cache_bytes, bool) or cache_bytes < 0:
            raise ValueError(f"{cache_bytes=} must be an int >= 0")
        if len(counts) != len(names):
            raise ValueError(f"{len(counts)=} and {len(names)=} must be equal")
        self.shard_names = tuple(names)
        self.shard_counts = np.asarray(counts, dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(self.shard_counts)]).astype(np.int64)
        self.cache_shards, self.cache_bytes = cache_shards, cache_bytes
        self._lru: OrderedDict[int, Any] = OrderedDict()
        self._held: dict[int, int] = {}  # shard -> the bytes its decoded form holds (with cache_bytes)
        self._lock = threading.Lock()
        self._remote: dict[int, StoredFile | None] = {}  # shard -> its remote file (None: local), for prefetching

    def __getstate__(self) -> dict[str, Any]:  # a worker process decodes its own shards
        return {k: v for k, v in self.__dict__.items() if k not in ("_lru", "_lock", "_remote", "_held")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lru, self._lock, self._remote, self._held = OrderedDict(), threading.Lock(), {}, {}

    def __len__(self) -> int:
        return int(self.shard_starts[-1])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples in {len(self.shard_names)} shards)"

    @property
    def num_shards(self) -> int:
        return len(self.shard_names)

    def shard_groups(self) -> np.ndarray:
        """The shard number of every sample (int64, sorted): ``ShardWindowShuffle(ds.shard_groups(), ...)``."""
        return np.repeat(np.arange(self.num_shards, dtype=np.int64), self.shard_counts)

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard, index in the shard)`` of sample ``index`` (negative counts from the end, as for a list)."""
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} is out of range for {n} samples")
        shard = int(np.searchsorted(self.shard_starts, i, side="right")) - 1
        return shard, i - int(self.shard_starts[shard])

    def __getitem__(self, index: int) -> dict[str, Any]:
        shard, local = self.locate(index)
        return self._sample(self.shard(shard), shard, local)

    def places(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(shards, indices in their shards)`` of samples ``indices`` (int64 arrays; ``locate`` of each, at once).

        Raises:
            IndexError: an index is out of range.
            TypeError: an index is not an integer.
        """
        at = np.asarray(indices)
        if at.dtype.kind not in "iu" or at.ndim != 1:  # bools, floats, objects: each one as ``locate`` takes it
            if not len(indices):
                return np.empty(0, np.int64), np.empty(0, np.int64)
            found, within = zip(*(self.locate(i) for i in indices))
            return np.asarray(found, np.int64), np.asarray(within, np.int64)
        n = len(self)
        at = np.where(at < 0, at + n, at).astype(np.int64, copy=False)
        if len(at) and (at.min() < 0 or at.max() >= n):
            bad = next(i for i, a in zip(indices, at.tolist()) if not 0 <= a < n)
            raise IndexError(f"index {bad} is out of range for {n} samples")
        shards = np.searchsorted(self.shard_starts, at, side="right") - 1
        return shards, at - self.shard_starts[shards]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples of ``indices``, each shard decoded once for the batch (the remote ones not local yet fetched at
        once, not one after the other)."""
        shards, local = self.places(indices)
        needed = list(dict.fromkeys(shards.tolist()))
        with self._lock:
            missing = [s for s in needed if s not in self._lru]
        if len(missing) > 1:
            demand_files([self._remote_file(s) for s in missing])
        loaded = {s: self.shard(s) for s in needed}
        return self._samples(loaded, list(zip(shards.tolist(), local.tolist())))

    def plan_reads(self, indices: Sequence[int], first: int = 0) -> None:
        """The samples the next reads take, in read order: their remote shards are fetched ahead in that order, into
        the node cache, by this process's prefetcher (replacing its plan); nothing for local shards.

        ``torch_drt.StatefulDataLoader`` calls it in the process that plans the batches, before each batch; another
        loader may call it the same way.

        Args:
            indices: the samples of the next batches, in the order they will be read.
            first: after a start or a resume, how many of ``indices`` the first batch reads (only their shards
                download until they are local); 0 in a running loader.
        """
        if not len(indices):
            return
        shards, _ = self.places(indices)
        files = [self._remote_file(s) for s in dict.fromkeys(shards.tolist())]
        prefetch_files(files, len(set(shards[:first].tolist())) if first else 0)

    def _samples(self, loaded: dict[int, Any], places: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Samples at ``places`` from the decoded shards, each shard's read at once (``_shard_samples``)."""
        out: list[Any] = [None] * len(places)
        by_shard: dict[int, list[int]] = {}
        for k, (s, _) in enumerate(places):
            by_shard.setdefault(s, []).append(k)
        for s, ks in by_shard.items():
            for k, sample in zip(ks, self._shard_samples(loaded[s], s, [places[k][1] for k in ks])):
                out[k] = sample
        return out

    def _shard_samples(self, decoded: Any, shard: int, indices: list[int]) -> list[Any]:
        """Samples ``indices`` of the decoded shard ``shard`` (readers gather their bytes at once)."""
        return [self._sample(decoded, shard, i) for i in indices]

    def shard(self, shard: int) -> Any:
        """Shard ``shard`` decoded (from this process's LRU, or loaded now)."""
        with self._lock:
            got = self._lru.get(shard)
            if got is not None:
                self._lru.move_to_end(shard)
                return got
        got = self._load(shard)  # outside the lock: threads decode different shards at once
        size = self._nbytes(got) if self.cache_bytes else 0
        with self._lock:
            self._lru[shard] = got
            self._lru.move_to_end(shard)
            self._held[shard] = size
            while len(self._lru) > self.cache_shards and (
                not self.cache_bytes or sum(self._held.values()) > self.cache_bytes
            ):
                self._held.pop(self._lru.popitem(last=False)[0], None)
        return got

    def _nbytes(self, decoded: Any) -> int:
        """The memory a decoded shard holds (readers that cache by bytes say it)."""
        return 0

    def _remote_file(self, shard: int) -> StoredFile | None:
        """Shard ``shard``'s remote file (opened once per process), or None when it is local (or not one file)."""
        if shard not in self._remote:
            self._remote[shard] = self._shard_remote_file(shard)
        return self._remote[shard]

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        """Open shard ``shard``'s file when it is remote and fetched whole into the node cache (remote readers)."""
        return None

    @abstractmethod
    def _load(self, shard: int) -> Any:
        """Read and decode shard ``shard`` (raising ``FormatError`` when it is damaged)."""

    @abstractmethod
    def _sample(self, decoded: Any, shard: int, index: int) -> dict[str, Any]:
        """Sample ``index`` of the decoded shard ``shard``, as a dict of fields."""
