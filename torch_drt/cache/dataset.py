"""CachedDataset: the loaded caches, the active metadata table and the reader position."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

from torch_drt._cpu_budget import reading_processes
from torch_drt.cache._dataset_position import DatasetPosition, Window
from torch_drt.cache._metadata_files import MetadataFiles
from torch_drt.cache._registry import registered
from torch_drt.cache._table import IDENTITY, WEIGHT, ActiveTable, build_table, validate_table
from torch_drt.cache.config import ReaderConfig
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CachedBatch, CachedSample
from torch_drt.cache.rows import RowStream
from torch_drt.cache.validate import CacheLayout, read_metadata
from torch_drt.describe import described

if TYPE_CHECKING:
    from torch_drt.cache.runtime import DatasetRuntime


logger = logging.getLogger("torch_drt.cache")

MetadataBackend = Literal["arrow", "polars"]


class CachedDataset(DatasetPosition):
    """An immutable set of caches read through one editable metadata table.

    Iterating yields ``epoch_len`` samples (the table's row count unless ``set_epoch_len`` changed it).
    Sequential iterators walk the table cyclically and the cursor carries across iterators; shuffled ones read one
    continuous stream seeded by ``ReaderConfig.seed`` in which every row comes once per epoch of ``len(table)``
    positions, in a new order each epoch (with ``ReaderConfig(sampling="weighted")``, and for
    ``torch_drt.compat.dataset_rt``'s datasets, draws by weight with replacement instead). Each iterator reserves
    its window of the stream when it is created and keeps its snapshot of the table and epoch length.

    Build it with ``DatasetRuntime.cached_dataset`` or ``DatasetRuntime.from_cache_sources``.

    Attributes:
        loader_defaults: what ``to_torch_dataloader`` does with ``shuffle``, ``seed``, ``verbose`` and
            ``multiprocessing_context`` left out, and how its streams are laid out: ``"torch_drt"`` (the
            ``ReaderConfig``'s shuffle and seed, quiet, the platform's start method, one stream per rank) here,
            ``"dataset-rt"`` for ``torch_drt.compat.dataset_rt``'s datasets (a style that package registers:
            ``torch_drt.cache.loader._loader_style``).
        sampling_default: what ``shuffle=True`` means when neither ``ReaderConfig.sampling``, ``sampling`` nor
            ``shard_window`` says: ``"permutation"`` (every row once per epoch) here, ``"weighted"`` (draws by
            weight with replacement) for ``torch_drt.compat.dataset_rt``'s datasets.
    """

    loader_defaults: ClassVar[str] = "torch_drt"
    sampling_default: ClassVar[Literal["permutation", "weighted"]] = "permutation"

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
        self.reader = CacheReader(self.layouts, reader_config.record_checks or "every_read")
        self._stored = layouts[0].arrow_schema
        self._cache_index = {layout.cache_id: i for i, layout in enumerate(layouts)}
        self._lock = threading.Lock()
        self._stored_tables = list(tables) if tables is not None else [read_metadata(lay) for lay in self.layouts]
        self._metadata_files = MetadataFiles(self.layouts)
        self._active = build_table(self.layouts, self._stored_tables)
        self._epoch_len = len(self._active)
        self._position = 0  # the stream position after every window reserved so far
        self._latest: Window | None = None  # the most recent iterator's window: what state_dict() reports
        self._resume_len: int | None = None  # the rest of an interrupted epoch, from a loaded state
        self._draws: tuple[ActiveTable, RowStream] | None = None  # the row stream of a table snapshot
        if logger.isEnabledFor(logging.INFO):
            logger.info("opened %d caches (%d rows): %s", len(self.layouts), len(self._active), self._shown_paths())

    def _shown_paths(self) -> list[str]:
        """The cache locations as reprs and logs show them (a URL without credentials or query)."""
        from torch_drt.sources.template import redact

        return [redact(str(p)) for p in self.cache_paths]

    def __repr__(self) -> str:
        config = self.reader_config
        return described(
            self,
            self._shown_paths() if len(self.layouts) <= 2 else f"{len(self.layouts)} caches",
            rows=len(self._active),
            epoch_len=self._epoch_len,
            shuffle=config.shuffle,
            seed=config.seed,
        )

    # -- population ---------------------------------------------------------------------------------------

    @property
    def cache_paths(self) -> list:
        """The cache directories, in cache-position order."""
        return [layout.path for layout in self.layouts]

    @property
    def active(self) -> ActiveTable:
        """The current snapshot of the active table (immutable)."""
        return self._active

    def get_metadata(self, backend: MetadataBackend | None = None) -> Any:
        """The active table: ``cache_id``, ``sample_id``, stored columns, ``weight`` and any extra columns.

        Args:
            backend: ``"arrow"`` (a ``pyarrow.Table``; also for None) or ``"polars"`` (a ``polars.DataFrame``
                sharing its buffers; ``pip install torch_drt[polars]``).

        Raises:
            ValueError: for another backend.
            CacheCorruptError: naming a cache's ``metadata.arrow`` that was removed or damaged since the dataset
                was opened, as dataset-rt, which reads it again here, fails.
        """
        backend = backend or "arrow"
        if backend not in ("arrow", "polars"):
            raise ValueError(f"{backend=} must be 'arrow' or 'polars'")
        self._metadata_files.check()
        if backend == "arrow":
            return self._active.table
        import polars as pl

        return pl.from_arrow(self._active.table, rechunk=False)

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
            CacheCorruptError: naming a cache's ``metadata.arrow`` removed or damaged since the dataset was opened.
        """
        self._metadata_files.check()
        active = validate_table(table, self.layouts, self._stored, self._cache_index)
        with self._lock:
            self._active = active
            self._epoch_len = len(active)
            self._position = 0
            self._latest, self._resume_len = None, None
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
        active, window = self._reserve()
        return self._delivered_batches(active, window, batch_size)

    def _batches(self, active: ActiveTable, start: int, count: int, batch_size: int) -> Iterator[CachedBatch]:
        stream = self.row_stream(active)

        def span(k: int) -> tuple[int, int] | None:  # batch k's stream positions: what remote caches prefetch
            return (start + k * batch_size, min(batch_size, count - k * batch_size)) if k * batch_size < count else None

        share = reading_processes() if self.reader.remote else 1  # the node's iterating processes split its quarter
        ahead = stream.read_ahead(self.reader, span, share=share)
        for k, offset in enumerate(range(0, count, batch_size)):
            ahead.before(k)
            yield self.read_rows(stream.rows(start + offset, min(batch_size, count - offset)), active)

    def _delivered_batches(self, active: ActiveTable, window: Window, batch_size: int) -> Iterator[CachedBatch]:
        for batch in self._batches(active, window.start, window.count, batch_size):
            window.delivered += len(batch)  # counted as it is handed over
            yield batch

    def __iter__(self) -> Iterator[CachedSample]:
        active, window = self._reserve()
        return self._samples(active, window)

    def _samples(self, active: ActiveTable, window: Window) -> Iterator[CachedSample]:
        for batch in self._batches(active, window.start, window.count, self.reader_config.prefetch_size):
            for sample in batch.samples():
                window.delivered += 1  # counted as it is handed over
                yield sample

    def to_torch_dataloader(self, **kwargs: Any) -> Any:
        """A finite, resumable ``torchdata`` ``StatefulDataLoader`` over the active table (a snapshot taken now).

        Keyword arguments are dataset-rt 0.4.8's, with its defaults, validation and messages (see
        ``docs/cache-loader.md``): ``sample_transform_fn``, ``collate_fn`` (torch's ``default_collate``),
        ``batch_size=1``, ``samples_per_epoch`` (global samples per pass; default ``len(self)``),
        ``num_workers="auto"`` (loading processes), ``native_num_workers="auto"``, ``shuffle``, ``seed`` (an int
        or ``"random"``), ``worker_partition``, ``work_dir``, ``drop_last``, ``pin_memory``, ``timeout``,
        ``multiprocessing_context`` (``"inherit"``, a start method or a context; default the platform's, as
        torch's, and ``"spawn"`` for compat datasets), ``worker_init_fn``, ``prefetch_factor="auto"``,
        ``persistent_workers="auto"``, ``verbose`` and ``dataloader_kwargs`` (only ``in_order=True``,
        ``snapshot_every_n_steps``). Left out, ``shuffle``/``seed`` are the ``ReaderConfig``'s, ``verbose``
        False; compat datasets: ``True``, ``"random"``, ``True``. torch_drt's own: ``sampling`` (shuffled,
        ``"permutation"``: every row once per epoch, or ``"weighted"``: draws by weight with replacement; default
        the ``ReaderConfig``'s, else ``sampling_default``) and ``shard_window`` (default the ``ReaderConfig``'s
        when shuffled), the locality-aware permutation; with ``"replicate"`` all ranks share one order by blocks.
        torch_drt's datasets read one stream per rank whose batches are dealt to the loading processes in turn,
        so a checkpoint resumes under any ``num_workers``; compat datasets give each process its own stream.
        ``num_workers="tune"`` (torch_drt's datasets; ``"auto"`` keeps dataset-rt's CPU budget) searches the loading
        processes and batches ahead from the loader's statistics during the first 5% of the epoch, under
        ``autotune_memory_cap`` bytes (default half the memory available, or a resumed checkpoint's cap), and keeps
        the choice in the checkpoint.
        ``shard_window="auto"`` (caches at URLs) chooses the window from the statistics at each epoch's start.

        Raises:
            ValueError: for invalid arguments or ``dataloader_kwargs``.
            TypeError: for a transform or collate function that cannot be pickled for loading processes.
            CacheCorruptError: naming a cache's ``metadata.arrow`` removed or damaged since the dataset was opened.
        """
        self._metadata_files.check()
        return registered("torch_dataloader")(self, **kwargs)  # the cache's loader wing (cache/loader/)

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
