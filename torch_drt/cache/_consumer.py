"""One consumer of the cache loader: rebuilt from paths in each loading process, streams whole batches.

A consumer is a (rank, loading worker) pair. It maps the loader's exported metadata snapshot (one immutable
Arrow file) and the caches' index files read-only, so several processes share those pages; what it allocates
privately is its stream position, the rows of the batch in hand, and (split + shuffle only) the cumulative
weights of its own span.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from torch.utils.data import IterableDataset, get_worker_info

from torch_drt.cache._transport import RingWriter
from torch_drt.cache.read_ahead import ReadAhead
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CachedSample, make_samples
from torch_drt.cache.shard_order import shard_window_order
from torch_drt.sampling.budget import row_span
from torch_drt.sampling.weighted import WeightedDraws

__all__ = ["CacheBatches", "export_snapshot"]

CACHE_POS, SAMPLE_ID, CACHE_ID, CUM_WEIGHT = "__cache_pos", "__sample_id", "__cache_id", "__cum_weight"


def export_snapshot(active: Any, cache_ids: list[int], path: Path) -> Path:
    """Write the active table as one Arrow IPC file the consumers map: identity, cumulative weight, metadata."""
    table = active.table
    meta = [n for n in table.column_names if n not in ("cache_id", "sample_id", "weight")]
    ids = np.asarray(cache_ids, dtype=np.uint64)[active.cache_pos]
    export = pa.Table.from_arrays(
        [
            pa.array(active.cache_pos.astype(np.int32)),
            pa.array(active.sample_ids.astype(np.int64)),
            pa.array(ids),
            pa.array(np.cumsum(active.weights)),
            *[table.column(n) for n in meta],
        ],
        names=[CACHE_POS, SAMPLE_ID, CACHE_ID, CUM_WEIGHT, *meta],
    ).combine_chunks()
    with ipc.new_file(str(path), export.schema) as writer:
        writer.write_table(export)
    return path


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).chunk(0).to_numpy(zero_copy_only=True)


class CacheBatches(IterableDataset):
    """The loader's iterable: yields this consumer's collated batches, pass after pass.

    Its state (``position`` in its stream, batches done in the current pass) resumes a pass exactly through
    ``torchdata``'s ``StatefulDataLoader``. A fresh copy (no persistent workers) starts its stream again.
    """

    POSITION_KEY = "position"
    DONE_KEY = "batches_done"

    def __init__(
        self,
        cache_paths: list[str],
        snapshot_path: str,
        *,
        plans: list[list[int]],
        rank: int,
        world_size: int,
        workers: int,
        shuffle: bool,
        seed: int,
        partition: str,
        transform: Callable[[CachedSample], Any] | None,
        collate_fn: Callable[[list[Any]], Any],
        native_num_workers: int,
        transport_slots: int = 0,
        shard_window: int | None = None,
    ) -> None:
        self.transport_slots = transport_slots
        self.shard_window = shard_window
        self.cache_paths = cache_paths
        self.snapshot_path = snapshot_path
        self.plans = plans
        self.rank, self.world_size, self.workers = rank, world_size, workers
        self.shuffle, self.seed, self.partition = shuffle, seed, partition
        self.transform, self.collate_fn = transform, collate_fn
        self.native_num_workers = native_num_workers
        self._position = 0
        self._done = 0
        self._resume = False
        self._opened_in: int | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self.plans)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in (
            "_reader",
            "_table",
            "_rows",
            "_draws",
            "_pool",
            "_cache_pos",
            "_sample_ids",
            "_cache_ids",
            "_ring",
        ):
            state.pop(key, None)
        state["_opened_in"] = None
        return state

    def _worker(self) -> int:
        info = get_worker_info()
        return 0 if info is None else info.id

    def _open(self) -> None:
        """Map the snapshot and the caches in this process (once per process)."""
        if self._opened_in == os.getpid():
            return
        self._reader = CacheReader.open(self.cache_paths)
        self._table = ipc.open_file(pa.memory_map(self.snapshot_path, "r")).read_all()
        self._cache_pos = _column(self._table, CACHE_POS)
        self._sample_ids = _column(self._table, SAMPLE_ID)
        self._cache_ids = _column(self._table, CACHE_ID)
        consumer = self.rank * self.workers + self._worker()
        n = self._table.num_rows
        if self.partition == "split":
            span = row_span(n, parts=self.world_size * self.workers, part=consumer)
            self._rows = np.arange(span.offset, span.offset + span.length, dtype=np.int64)
        else:
            self._rows = None  # the whole table, no private copy
        if self.shuffle and self.shard_window:  # one locality order: the whole table's, or this consumer's span
            rows = slice(None) if self._rows is None else self._rows
            weights = np.diff(_column(self._table, CUM_WEIGHT), prepend=0.0)[rows]
            self._draws = shard_window_order(
                self._reader, self._cache_pos[rows], self._sample_ids[rows], weights, window=self.shard_window,
                seed=self.seed, block=self._block() if self._rows is None else None,
            )
        elif self.shuffle:
            cum = _column(self._table, CUM_WEIGHT)
            if self._rows is not None and len(self._rows):
                a, b = int(self._rows[0]), int(self._rows[-1]) + 1
                weights = np.diff(cum[a:b], prepend=cum[a - 1] if a else 0.0)  # the span's own weights
                self._draws = WeightedDraws(weights, self.seed, stream=consumer)
            else:
                self._draws = WeightedDraws.from_cumulative(cum, self.seed, stream=consumer)
        self._pool = ThreadPoolExecutor(self.native_num_workers) if self.native_num_workers > 1 else None
        in_worker = get_worker_info() is not None
        self._ring = RingWriter(self.transport_slots) if in_worker and self.transport_slots else None
        self._opened_in = os.getpid()

    def _block(self) -> tuple[int, int, int] | None:
        """This consumer's (budget, offset, total) in the order all consumers share (ranks' budgets are equal)."""
        local = sum(sum(p) for p in self.plans)
        budget = sum(self.plans[self._worker()]) if self._worker() < len(self.plans) else 0
        offset = self.rank * local + sum(sum(p) for p in self.plans[: self._worker()])
        return (budget, offset, local * self.world_size) if budget else None

    def _stream_rows(self, start: int, count: int) -> np.ndarray:
        population = self._table.num_rows if self._rows is None else len(self._rows)
        if population == 0:
            raise ValueError("this consumer's share of the metadata table is empty (more consumers than rows)")
        if self.shuffle:
            local = self._draws.draws(start, count)
        else:
            local = np.arange(start, start + count, dtype=np.int64) % population
        return local if self._rows is None else self._rows[local]

    def _read(self, rows: np.ndarray) -> list[bytes]:
        cache_pos, sample_ids = self._cache_pos[rows], self._sample_ids[rows]
        if self._pool is None or len(rows) < 2 * self.native_num_workers:
            return self._reader.read_many(cache_pos, sample_ids)
        parts = np.array_split(np.arange(len(rows)), self.native_num_workers)
        chunks = self._pool.map(lambda p: self._reader.read_many(cache_pos[p], sample_ids[p]), parts)
        return [d for chunk in chunks for d in chunk]

    def read_batch(self, rows: np.ndarray) -> list[CachedSample]:
        """Read active-snapshot ``rows`` as samples (payload, metadata dict, cache_id, sample_id)."""
        meta = self._table.select(self._table.column_names[4:]).take(pa.array(rows))
        return make_samples(self._read(rows), meta, self._cache_ids[rows], self._sample_ids[rows])

    def __iter__(self) -> Iterator[Any]:
        self._open()
        plan = self.plans[self._worker()] if self._worker() < len(self.plans) else []
        if not self._resume or self._done >= len(plan):  # a new pass, unless a loaded state is mid-pass
            self._done = 0
        self._resume = False
        ahead = ReadAhead(self._reader, lambda k: self._batch_rows(plan, k))
        while self._done < len(plan):
            ahead.before(self._done)
            size = plan[self._done]
            rows = self._stream_rows(self._position, size)
            self._position += size
            self._done += 1
            samples = self.read_batch(rows)
            items = samples if self.transform is None else [self.transform(s) for s in samples]
            batch = self.collate_fn(items)
            yield batch if self._ring is None else self._ring.pack(batch)

    def _batch_rows(self, plan: list[int], k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The (cache positions, sample ids) of batch ``k`` of this pass, from the current position (prefetching)."""
        if k >= len(plan):
            return None
        rows = self._stream_rows(self._position + sum(plan[self._done : k]), plan[k])
        return self._cache_pos[rows], self._sample_ids[rows]

    def state_dict(self) -> dict[str, int]:
        """This consumer's stream position and progress in the current pass."""
        return {self.POSITION_KEY: self._position, self.DONE_KEY: self._done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume this consumer's stream and pass."""
        self._position = int(state[self.POSITION_KEY])
        self._done = int(state[self.DONE_KEY])
        self._resume = True
