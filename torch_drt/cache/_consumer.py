"""The cache loader's fetch stage: a consumer's stream batch -> active-table rows -> samples -> transform -> collate.

It runs in the loading processes (or inline), rebuilt there from paths and settings: it maps the loader's
exported metadata snapshot (one immutable Arrow file) and the caches' files read-only, so processes share those
pages. What it allocates privately: the rows and payloads of the batch in hand, the batch it builds, and for
split partitions with shuffle the population rows and weights of the consumers it serves (16 bytes per row of
their spans).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CachedSample, make_samples
from torch_drt.loader.iterator import Fetched
from torch_drt.nodes.stream_plan import StreamBatch
from torch_drt.nodes.thread_pool import ThreadPool
from torch_drt.random import enter_batch, exit_batch, map_items
from torch_drt.sampling.budget import ConsumerPlan
from torch_drt.sampling.permutation import KeyedPermutation
from torch_drt.sampling.weighted import WeightedDraws

if TYPE_CHECKING:
    from torch_drt.cache._loader_log import ReaderEvents

__all__ = ["RowFetcher", "export_snapshot", "stream_id"]

CACHE_POS, SAMPLE_ID, CACHE_ID, CUM_WEIGHT = "__cache_pos", "__sample_id", "__cache_id", "__cum_weight"
_IDENTITY = 4  # the snapshot's leading columns; the metadata columns follow


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


def stream_id(plan: ConsumerPlan, consumers: int) -> int:
    """The draw stream of a consumer: ``rank * consumers + worker`` (``consumers``: per rank)."""
    return plan.rank * consumers + plan.worker


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).chunk(0).to_numpy(zero_copy_only=True)


class _OneArg:
    """``sample_transform_fn(sample)`` as ``transform(row, sample)``."""

    def __init__(self, fn: Callable[[CachedSample], Any]) -> None:
        self.fn = fn

    def __call__(self, row: int, sample: CachedSample) -> Any:
        return self.fn(sample)


class RowFetcher:
    """Loads ``StreamBatch``es of this rank's consumers (picklable: it opens its files in each process).

    Consumer ``w`` (stream id ``rank * consumers + w``) reads stream positions ``s`` as rows: sequential, the
    cyclic span ``(offset + s mod population) mod rows``; shuffled, draws by weight with replacement from
    ``WeightedDraws(weights, seed, stream=id)`` over the whole table (replicate) or over its span of a keyed
    permutation of the rows (split).

    Args:
        cache_paths: the caches, in cache-position order.
        snapshot_path: the exported metadata snapshot.
        plans: this rank's consumer plans.
        shuffle: weighted draws instead of the sequential walk.
        seed: the sampling seed (and the items' random generators' seed).
        partition: ``"split"`` or ``"replicate"``.
        transform: ``sample_transform_fn(sample) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        native_num_workers: reader threads per process.
        pin: pin batches (when loading inline; process workers pin when unpacking).
        events: the consumers' ``verbose`` events, or None.
    """

    def __init__(
        self,
        cache_paths: list[str],
        snapshot_path: str,
        *,
        plans: tuple[ConsumerPlan, ...],
        shuffle: bool,
        seed: int,
        partition: str,
        transform: Callable[[CachedSample], Any] | None,
        collate_fn: Callable[[list[Any]], Any],
        native_num_workers: int = 1,
        pin: bool = False,
        events: ReaderEvents | None = None,
    ) -> None:
        self.cache_paths, self.snapshot_path, self.plans = cache_paths, snapshot_path, plans
        self.shuffle, self.seed, self.partition = shuffle, seed, partition
        self.transform = None if transform is None else _OneArg(transform)
        self.collate_fn, self.native_num_workers, self.pin = collate_fn, native_num_workers, pin
        self.events = events
        self._opened_in: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        keep = ("cache_paths", "snapshot_path", "plans", "shuffle", "seed", "partition", "transform", "collate_fn")
        return {k: self.__dict__[k] for k in (*keep, "native_num_workers", "pin", "events")} | {"_opened_in": None}

    def _open(self) -> None:
        """Map the snapshot and the caches in this process (once per process)."""
        if self._opened_in == os.getpid():
            return
        self._reader = CacheReader.open(self.cache_paths)
        self._table = ipc.open_file(pa.memory_map(self.snapshot_path, "r")).read_all()
        self._meta = self._table.select(self._table.column_names[_IDENTITY:])
        self._cache_pos = _column(self._table, CACHE_POS)
        self._sample_ids = _column(self._table, SAMPLE_ID)
        self._cache_ids = _column(self._table, CACHE_ID)
        self._streams: dict[int, Any] = {}
        n = self.native_num_workers
        self._pool = ThreadPool(self._read_part, n, name="torch_drt-reader") if n > 1 else None
        self._opened_in = os.getpid()

    def _stream(self, worker: int) -> Any:
        """The consumer's draw stream, or None for a sequential walk (built once per process)."""
        if worker not in self._streams:
            plan, rows = self.plans[worker], self._table.num_rows
            stream = stream_id(plan, len(self.plans))
            cum = _column(self._table, CUM_WEIGHT)
            if not self.shuffle:
                self._streams[worker] = None
            elif self.partition == "replicate":
                self._streams[worker] = WeightedDraws.from_cumulative(cum, self.seed, stream=stream)
            else:
                population = KeyedPermutation(rows, self.seed)((plan.offset + np.arange(plan.population_size)) % rows)
                weights = np.diff(cum, prepend=0.0)[population]
                self._streams[worker] = (population, WeightedDraws(weights, self.seed, stream=stream))
        return self._streams[worker]

    def rows(self, batch: StreamBatch) -> np.ndarray:
        """The active-table rows of a stream batch."""
        self._open()
        plan, stream = self.plans[batch.worker], self._stream(batch.worker)
        if stream is None:
            s = np.arange(batch.start, batch.start + batch.count, dtype=np.int64)
            return (plan.offset + s % plan.population_size) % self._table.num_rows
        if isinstance(stream, WeightedDraws):
            return stream.draws(batch.start, batch.count)
        population, draws = stream
        return population[draws.draws(batch.start, batch.count)]

    def _read_part(self, part: tuple[np.ndarray, np.ndarray]) -> list[bytes]:
        return self._reader.read_many(*part)

    def read(self, rows: np.ndarray) -> list[CachedSample]:
        """The samples of active-snapshot ``rows`` (payload, metadata dict, cache_id, sample_id)."""
        self._open()
        cache_pos, sample_ids = self._cache_pos[rows], self._sample_ids[rows]
        if self._pool is None or len(rows) < 2 * self.native_num_workers:
            data = self._reader.read_many(cache_pos, sample_ids)
        else:
            parts = np.array_split(np.arange(len(rows)), self.native_num_workers)
            data = [d for chunk in self._pool.map([(cache_pos[p], sample_ids[p]) for p in parts]) for d in chunk]
        return make_samples(data, self._meta.take(pa.array(rows)), self._cache_ids[rows], sample_ids)

    def __call__(self, batch: StreamBatch) -> Fetched:
        if self.events is not None:
            self.events.on_batch(batch)
        rows = self.rows(batch)
        indices = rows.tolist()
        token = enter_batch(self.seed, batch.epoch, indices, batch.positions)
        try:
            samples = self.read(rows)
            items = samples if self.transform is None else map_items(self.transform, indices, samples, batch.positions)
            out = self.collate_fn(items)
        finally:
            exit_batch(token)
        if self.pin:
            from torch.utils.data._utils.pin_memory import pin_memory

            out = pin_memory(out)
        return Fetched(out, indices, batch.last)
