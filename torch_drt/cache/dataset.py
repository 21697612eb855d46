"""CachedDataset: the loaded caches, the active metadata table and the reader position."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from torch_drt.cache._table import IDENTITY, WEIGHT, ActiveTable, build_table, validate_table
from torch_drt.cache.config import ReaderConfig
from torch_drt.cache.read_ahead import ReadAhead
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CachedSample, make_samples
from torch_drt.cache.shard_order import ShardWindowOrder, shard_window_order
from torch_drt.cache.validate import CacheLayout, read_metadata
from torch_drt.sampling.weighted import WeightedDraws

if TYPE_CHECKING:
    from torch_drt.cache.runtime import DatasetRuntime

__all__ = ["CachedBatch", "CachedDataset"]


@dataclass(frozen=True)
class CachedBatch:
    """Samples read together: payloads plus their rows' identity and metadata columns.

    Attributes:
        data: the payloads, in order.
        cache_id: the rows' cache ids (uint64).
        sample_id: the rows' sample ids (int64).
        rows: the rows' positions in the active table (int64).
        metadata: the rows' stored and extra metadata columns as an Arrow table.
    """

    data: list[bytes]
    cache_id: np.ndarray
    sample_id: np.ndarray
    rows: np.ndarray
    metadata: pa.Table

    def __len__(self) -> int:
        return len(self.data)

    def samples(self) -> list[CachedSample]:
        """The batch as ``CachedSample``s, in order."""
        return make_samples(self.data, self.metadata, self.cache_id, self.sample_id)


class CachedDataset:
    """An immutable set of caches read through one editable metadata table.

    Iterating yields ``epoch_len`` samples (the table's row count unless ``set_epoch_len`` changed it).
    Sequential iterators walk the table cyclically and the cursor carries across iterators; shuffled ones draw
    rows by weight with replacement from one continuous stream seeded by ``ReaderConfig.seed``. Each iterator
    reserves its window of the stream when it is created and keeps its snapshot of the table and epoch length.

    Build it with ``DatasetRuntime.cached_dataset`` or ``DatasetRuntime.from_cache_sources``.
    """

    STATE_VERSION = 1
    MODE_KEY = "mode"
    POSITION_KEY = "position"
    EPOCH_LEN_KEY = "epoch_len"
    FINGERPRINT_KEY = "table_fingerprint"
    SEED_KEY = "seed"
    VERSION_KEY = "version"

    def __init__(
        self,
        runtime: DatasetRuntime,
        layouts: Sequence[CacheLayout],
        reader_config: ReaderConfig,
        tables: Sequence[pa.Table] | None = None,
    ) -> None:
        ids = [layout.cache_id for layout in layouts]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            paths = [str(layout.path) for layout in layouts if layout.cache_id == dup]
            raise ValueError(f"caches {paths} share cache_id {dup}: load each cache once")
        schemas = {layout.schema for layout in layouts}
        if len(schemas) > 1:
            described = "; ".join(f"{layout.path}: {list(layout.schema)}" for layout in layouts)
            raise ValueError(f"all caches must share one metadata schema, got {described}")
        self._runtime = runtime  # a dataset keeps its runtime (and its pool) alive
        self.layouts = tuple(layouts)
        self.reader_config = reader_config
        self.reader = CacheReader(self.layouts)
        self._stored = layouts[0].arrow_schema
        self._cache_index = {layout.cache_id: i for i, layout in enumerate(layouts)}
        self._lock = threading.Lock()
        self._stored_tables = list(tables) if tables is not None else [read_metadata(lay) for lay in self.layouts]
        self._active = build_table(self.layouts, self._stored_tables)
        self._epoch_len = len(self._active)
        self._position = 0
        self._draws: WeightedDraws | ShardWindowOrder | None = None

    # -- population ---------------------------------------------------------------------------------------

    @property
    def cache_paths(self) -> list:
        """The cache directories, in cache-position order."""
        return [layout.path for layout in self.layouts]

    @property
    def active(self) -> ActiveTable:
        """The current snapshot of the active table (immutable)."""
        return self._active

    def get_metadata(self) -> pa.Table:
        """The active table: ``cache_id``, ``sample_id``, stored columns, ``weight`` and any extra columns."""
        return self._active.table

    def update_metadata(self, table: Any) -> None:
        """Replace the active table after validating it whole; the cache on disk is never rewritten.

        Rows may be removed, duplicated or reordered, weights changed and extra columns added. On success the
        sampling stream restarts and the epoch length becomes the row count; on failure nothing changes.
        Iterators already created keep their snapshot.

        Args:
            table: a pyarrow Table or any Arrow-compatible table (polars, pandas).

        Raises:
            ValueError: naming the column and row at fault.
            TypeError: when ``table`` is not a table.
        """
        active = validate_table(table, self.layouts, self._stored, self._cache_index)
        with self._lock:
            self._active = active
            self._epoch_len = len(active)
            self._position = 0
            self._draws = None

    def set_epoch_len(self, n: int) -> None:
        """Set how many samples each future iterator yields.

        Raises:
            ValueError: when ``n < 1``.
        """
        if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
            raise ValueError(f"epoch length {n=} must be an int >= 1")
        with self._lock:
            self._epoch_len = int(n)

    def __len__(self) -> int:
        return self._epoch_len

    # -- position -----------------------------------------------------------------------------------------

    def _weighted(self, active: ActiveTable) -> WeightedDraws | ShardWindowOrder:
        if self._draws is None:
            config = self.reader_config
            self._draws = (
                WeightedDraws(active.weights, config.seed)
                if config.shard_window is None
                else shard_window_order(
                    self.reader, active.cache_pos, active.sample_ids, active.weights,
                    window=config.shard_window, seed=config.seed,
                )
            )
        return self._draws

    def rows_at(self, active: ActiveTable, start: int, count: int) -> np.ndarray:
        """Active-table rows at reader positions ``start .. start+count-1`` (a pure function of them)."""
        if self.reader_config.shuffle:
            return self._weighted(active).draws(start, count)
        return (np.arange(start, start + count, dtype=np.int64)) % len(active)

    def _reserve(self) -> tuple[ActiveTable, int, int]:
        with self._lock:
            start, count = self._position, self._epoch_len
            self._position += count
            return self._active, start, count

    def _mode(self) -> str:
        config = self.reader_config
        if not config.shuffle:
            return "sequential"
        return "shuffle" if config.shard_window is None else f"shard_window={config.shard_window}"

    def state_dict(self) -> dict[str, Any]:
        """The reader position: mode, stream position, epoch length, seed and the table's fingerprint."""
        with self._lock:
            return {
                self.VERSION_KEY: self.STATE_VERSION,
                self.MODE_KEY: self._mode(),
                self.POSITION_KEY: self._position,
                self.EPOCH_LEN_KEY: self._epoch_len,
                self.SEED_KEY: self.reader_config.seed,
                self.FINGERPRINT_KEY: self._active.fingerprint,
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved position in O(1).

        Raises:
            ValueError: when the state was taken on another table, mode or seed.
        """
        mode = self._mode()
        if state.get(self.FINGERPRINT_KEY) != self._active.fingerprint:
            raise ValueError(
                "state was taken on a different metadata table (fingerprint "
                f"{state.get(self.FINGERPRINT_KEY)!r} != {self._active.fingerprint!r}); apply the same "
                "update_metadata() before load_state_dict()"
            )
        if state.get(self.MODE_KEY) != mode or state.get(self.SEED_KEY) != self.reader_config.seed:
            raise ValueError(
                f"state was taken with mode={state.get(self.MODE_KEY)!r} seed={state.get(self.SEED_KEY)!r}, "
                f"this dataset reads with mode={mode!r} seed={self.reader_config.seed!r}"
            )
        position, epoch_len = int(state[self.POSITION_KEY]), int(state[self.EPOCH_LEN_KEY])
        if position < 0 or epoch_len < 1:
            raise ValueError(f"invalid state: {position=} {epoch_len=}")
        with self._lock:
            self._position, self._epoch_len = position, epoch_len

    # -- reading ------------------------------------------------------------------------------------------

    def read_rows(self, rows: np.ndarray, active: ActiveTable | None = None) -> CachedBatch:
        """Read the samples of active-table ``rows`` in one gather.

        Raises:
            IndexError: for a row outside the active table.
        """
        active = self._active if active is None else active
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(active)):
            bad = int(rows[(rows < 0) | (rows >= len(active))][0])
            raise IndexError(f"row {bad} is out of range for the active metadata table ({len(active)} rows)")
        cache_pos, sample_ids = active.cache_pos[rows], active.sample_ids[rows]
        data = self.reader.read_many(cache_pos, sample_ids)
        meta_cols = [n for n in active.table.column_names if n not in (*IDENTITY, WEIGHT)]
        metadata = active.table.select(meta_cols).take(pa.array(rows))
        cache_ids = np.array([self.layouts[p].cache_id for p in range(len(self.layouts))], dtype=np.uint64)
        return CachedBatch(data, cache_ids[cache_pos], sample_ids, rows, metadata)

    def iter_batches(self, batch_size: int) -> Iterator[CachedBatch]:
        """Yield this iterator's ``len(self)`` samples as batches of ``batch_size`` (the last may be short)."""
        if batch_size < 1:
            raise ValueError(f"{batch_size=} must be > 0")
        active, start, count = self._reserve()
        return self._batches(active, start, count, batch_size)

    def _batches(self, active: ActiveTable, start: int, count: int, batch_size: int) -> Iterator[CachedBatch]:
        def batch_rows(k: int) -> tuple[np.ndarray, np.ndarray] | None:  # what remote caches prefetch
            if k * batch_size >= count:
                return None
            rows = self.rows_at(active, start + k * batch_size, min(batch_size, count - k * batch_size))
            return active.cache_pos[rows], active.sample_ids[rows]

        ahead = ReadAhead(self.reader, batch_rows)
        for k, offset in enumerate(range(0, count, batch_size)):
            ahead.before(k)
            yield self.read_rows(self.rows_at(active, start + offset, min(batch_size, count - offset)), active)

    def __iter__(self) -> Iterator[CachedSample]:
        active, start, count = self._reserve()
        return self._samples(active, start, count)

    def _samples(self, active: ActiveTable, start: int, count: int) -> Iterator[CachedSample]:
        for batch in self._batches(active, start, count, self.reader_config.prefetch_size):
            yield from batch.samples()

    def to_torch_dataloader(self, **kwargs: Any) -> Any:
        """A finite ``torchdata`` ``StatefulDataLoader`` over the active table (a snapshot taken now).

        Keyword arguments (dataset-rt's): ``sample_transform_fn`` (``CachedSample -> item``, on the loading
        workers), ``collate_fn`` (default torch's ``default_collate``), ``batch_size``, ``samples_per_epoch``
        (global samples per pass; default ``len(self)``), ``num_workers`` (loading processes), ``native_num_workers``
        (reader threads per consumer), ``shuffle`` and ``seed`` (default: the ``ReaderConfig``'s; ``"random"``
        draws one that all ranks share), ``worker_partition`` (``"replicate"`` when shuffled, ``"split"`` when
        sequential), ``drop_last``, ``pin_memory``, ``timeout``, ``multiprocessing_context`` (spawn, fork,
        forkserver), ``persistent_workers`` (default True with workers), ``prefetch_factor``, ``worker_init_fn``,
        ``shard_window`` (torch_drt's: the locality-aware shuffle of ``ReaderConfig.shard_window``, which it
        defaults to; with ``"replicate"`` all consumers share one order, each taking every C-th row) and
        ``dataloader_kwargs`` (keys that collide with these or set ``dataset``, ``sampler`` or
        ``batch_sampler`` are refused).

        Budgets: each of W ranks takes ``ceil(S / W)`` samples (or ``floor(S / (W * B)) * B`` with
        ``drop_last``); rank zero warns when that changes the global budget. Loading workers divide a rank's
        batches. See ``docs/cache-loader.md`` for the sampling streams and what reproduces them.

        Raises:
            ValueError: for invalid arguments or colliding ``dataloader_kwargs``.
            TypeError: for a transform or collate function that cannot be pickled for loading processes.
        """
        from torch_drt.cache.torch_loader import to_torch_dataloader

        return to_torch_dataloader(self, **kwargs)

    def get_item(self, cache_id: int, sample_id: int) -> CachedSample:
        """Read one sample by identity, whether or not it is in the active table (its stored metadata only).

        Raises:
            TypeError: when an id is not an int (``bool`` and ``float`` included), as in dataset-rt.
            IndexError: for an unknown ``cache_id`` or a ``sample_id`` outside the cache, as in dataset-rt.
        """
        for name, value in (("cache_id", cache_id), ("sample_id", sample_id)):
            if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
        pos = self._cache_index.get(int(cache_id))
        if pos is None:
            raise IndexError(f"cache_id {cache_id} is not loaded; known: {sorted(self._cache_index)}")
        layout = self.layouts[pos]
        if not 0 <= int(sample_id) < layout.sample_count:
            raise IndexError(f"sample_id {sample_id} is out of range for cache {layout.path} ({layout.sample_count})")
        row = self._stored_tables[pos].slice(int(sample_id), 1).to_pylist()[0]
        return CachedSample(self.reader.read(pos, int(sample_id)), row, int(cache_id), int(sample_id))
