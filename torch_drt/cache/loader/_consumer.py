"""The cache loader's fetch stage: a consumer's stream batch -> active-table rows -> samples -> transform -> collate.

It runs in the loading processes (or inline), rebuilt there from the caches and settings: it maps the loader's
exported metadata snapshot (one immutable Arrow file) and the caches' files read-only, so processes share those
pages. What it allocates privately: the rows and payloads of the batch in hand, the batch it builds, and for
split partitions with shuffle the population rows and weights of the consumers it serves (16 bytes per row of
their spans).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from torch_drt._cpu_budget import node_processes
from torch_drt._distinct import distinct, first_seen
from torch_drt._stage_clock import BatchTimes
from torch_drt.cache.loader._snapshot import Snapshot
from torch_drt.cache.read_ahead import ReadAhead
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CachedSample, samples_of
from torch_drt.cache.rows import RowStream, order_name
from torch_drt.loader.iterator import Fetched
from torch_drt.nodes.stream_plan import StreamBatch, consumer_batch
from torch_drt.nodes.thread_pool import ThreadPool
from torch_drt.random import enter_batch, exit_batch, map_items
from torch_drt.sampling.budget import ConsumerPlan, batch_counts

if TYPE_CHECKING:
    from torch_drt.cache.loader._events import ReaderEvents
    from torch_drt.locations import CacheBackend


class RowFetcher:
    """Loads ``StreamBatch``es of this rank's consumers (picklable: it opens its files in each process).

    Which rows a consumer's stream reads is its ``torch_drt.cache.rows.RowStream``'s (built on its first use in a
    process). A batch's ``worker`` is the loading
    process it is loaded on: with ``dealt_to == 1`` also its consumer (each process reads its own stream,
    dataset-rt's layout); with ``dealt_to > 1`` the rank has one consumer whose batches are dealt to ``dealt_to``
    processes in turn (batch ``d`` of a pass on process ``d % dealt_to``). Before reading a batch of caches at
    URLs, the fetcher hands the reader the shards of the next batches its process loads (``ReadAhead``, in the
    process that reads them; the future is known: rows are a pure function of the stream position); for local
    caches that costs one attribute test.

    Args:
        caches: the caches, in cache-position order: paths, or backends (a URL's carries its options and remote
            settings to the loading processes).
        snapshot_path: the exported metadata snapshot.
        plans: this rank's consumer plans.
        shuffle: a shuffled order instead of the sequential walk.
        seed: the sampling seed (and the items' random generators' seed).
        partition: ``"split"`` or ``"replicate"``.
        transform: ``sample_transform_fn(sample) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        native_num_workers: reader threads per process.
        pin: pin batches (when loading inline; process workers pin when unpacking).
        events: the consumers' ``verbose`` events, or None.
        shard_window: the locality-aware shuffle's window (None: ``sampling`` decides).
        world_size: ranks.
        sampling: ``"permutation"`` or ``"weighted"`` (when shuffled).
        dealt_to: the loading processes a consumer's batches are dealt to in turn (1: a consumer per process).
        batch_size: items per batch, and ``continue_streams``: whether streams continue across passes (the
            geometry of the future batches prefetching looks at; ``torch_drt.nodes.stream_plan.consumer_batch``).
        reader: the dataset's reader of ``caches``, which the process that makes the fetcher reads with (loading
            inline then opens nothing); other processes open their own.
        snapshot: ``snapshot_path`` mapped by the process that makes the fetcher, which it reads with (loading
            inline: the loader maps it when it is built, not at its first batch); other processes map their own.
    """

    _KEPT = ("caches", "snapshot_path", "plans", "shuffle", "seed", "partition", "transform", "collate_fn",
             "native_num_workers", "pin", "events", "shard_window", "world_size", "batch_size", "continue_streams",
             "sampling", "dealt_to", "record_checks")
    _streams: dict[int, RowStream]  # set in the process that opens the caches (``_open``)
    _ahead: dict[int, ReadAhead]

    def __init__(
        self,
        caches: Sequence[str | CacheBackend],
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
        shard_window: int | None = None,
        world_size: int = 1,
        batch_size: int = 1,
        continue_streams: bool = True,
        reader: CacheReader | None = None,
        snapshot: Snapshot | None = None,
        sampling: str = "permutation",
        dealt_to: int = 1,
    ) -> None:
        if dealt_to > 1 and len(plans) != 1:
            raise ValueError(f"batches are dealt to {dealt_to} processes from one consumer, not {len(plans)}")
        self.caches, self.snapshot_path, self.plans = list(caches), snapshot_path, plans
        self.shuffle, self.seed, self.partition = shuffle, seed, partition
        self.transform = transform
        self.collate_fn, self.native_num_workers, self.pin = collate_fn, native_num_workers, pin
        self.events = events
        self.shard_window, self.world_size = shard_window, world_size
        self.batch_size, self.continue_streams = batch_size, continue_streams
        self.sampling, self.dealt_to = sampling, dealt_to
        self.record_checks = reader.record_checks if reader is not None else "every_read"  # the dataset's
        self._opened_in: int | None = None
        self._made_in = (os.getpid(), reader, snapshot)

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._KEPT} | {"_opened_in": None, "_made_in": (None, None, None)}

    def _open(self) -> None:
        """Map the snapshot and the caches in this process (once per process). A process forked from one that
        opened them keeps its copies of that one's reader, snapshot and streams (no index read again, no order
        built again: the loader's process plans the first batches before it forks its loading processes); only
        the read-ahead and the reader threads are its own."""
        if self._opened_in == os.getpid():
            return
        if self._opened_in is None:  # (a pickled fetcher comes without them: see __getstate__)
            pid, reader, snapshot = self._made_in
            here = pid == os.getpid()
            if reader is None or not here:
                reader = CacheReader.open(self.caches, record_checks=self.record_checks)
            self._reader = reader
            self._snapshot = snapshot if snapshot is not None and here else Snapshot(self.snapshot_path)
            self._new_streams()
        else:  # forked: the parent's read-ahead planned the parent's prefetch
            self._ahead = {}
        self._remote = self._reader.remote
        self._counts = batch_counts(self.plans, self.batch_size)
        n = self.native_num_workers
        self._pool = ThreadPool(self._read_part, n, name="torch_drt-reader") if n > 1 else None
        self._opened_in = os.getpid()

    def _new_streams(self) -> None:
        self._streams = {}
        self._ahead = {}

    def _stream(self, consumer: int) -> RowStream:
        stream = self._streams.get(consumer)
        if stream is None:
            order = order_name(self.shuffle, self.shard_window, self.sampling)
            stream = self._streams[consumer] = RowStream.of_consumer(
                self.plans, consumer, self._snapshot, order=order, seed=self.seed, partition=self.partition,
                world_size=self.world_size, window=self.shard_window, reader=self._reader)
        return stream

    def stop_prefetch(self) -> None:
        """Withdraw this process's prefetch plans (its loader is closed: what it started stops)."""
        ahead_of = self.__dict__.get("_ahead", {})  # none before this process opened the caches
        for ahead in ahead_of.values():
            ahead.stop()
        ahead_of.clear()

    def fetch_first(self, batches: Sequence[StreamBatch]) -> None:
        """Start downloading the shards of ``batches`` in this process, in their order (caches at URLs only): the
        loader's process calls it with its loading processes' first batches once it started them, so that the
        network works while they start. It reads nothing: the processes read the batches as ever and find their
        shards in the node cache, downloaded or downloading."""
        self._open()
        if not self._remote or not batches:
            return
        snap = self._snapshot
        rows = [self.rows(batch) for batch in batches]
        every = np.concatenate(rows)
        shards = self._reader.shard_groups(snap.cache_pos[every], snap.sample_ids[every])
        first = len(distinct(shards[: len(rows[0])]))  # the first batch's shards lead: the others wait for them
        self._reader.fetch_first(first_seen(shards), first)

    def reseed(self, seed: int) -> None:
        """Read with ``seed`` from now on (a checkpoint's, adopted by a ``seed="random"`` loader): the streams this
        process built with the old seed are built anew."""
        self.seed = seed
        if self.events is not None:
            self.events.seed = seed
        if self._opened_in is not None:  # (streams opened here, or a parent's this process forked with)
            self._new_streams()

    def rewindow(self, window: int) -> None:
        """Read with shard window ``window`` from now on (``shard_window="auto"``, at an epoch's start): the streams
        and read-ahead this process built with the old one are built anew."""
        self.shard_window = window
        if self._opened_in is not None:
            self.stop_prefetch()
            self._new_streams()

    def stream(self, batch: StreamBatch) -> int:
        """The consumer whose stream ``batch`` belongs to."""
        return 0 if self.dealt_to > 1 else batch.worker

    def rows(self, batch: StreamBatch) -> np.ndarray:
        """The active-table rows of a stream batch."""
        self._open()
        return self._stream(self.stream(batch)).rows(batch.start, batch.count)

    def _lane(self, worker: int) -> tuple[int, int, int]:
        """(consumer, its first batch, batches per pass) of the batches process ``worker`` loads: every
        ``dealt_to``-th batch of its consumer's pass."""
        if self.dealt_to == 1:
            return worker, 0, self._counts[worker]
        return 0, worker, len(range(worker, self._counts[0], self.dealt_to))

    def _span(self, worker: int, j: int) -> tuple[int, int] | None:
        """The stream span (start, count) of the ``j``-th batch process ``worker`` loads, counted over passes."""
        consumer, first, per_pass = self._lane(worker)
        if per_pass == 0:
            return None
        epoch, k = divmod(j, per_pass)
        return consumer_batch(self.plans[consumer], self.batch_size, epoch, first + k * self.dealt_to,
                              self.continue_streams)

    def _read_ahead(self, batch: StreamBatch, rows: np.ndarray) -> None:
        """Plan the prefetch of the shards of ``batch`` (its ``rows``) and of the next batches its process loads
        (caches at URLs only)."""
        ahead = self._ahead.get(batch.worker)
        if ahead is None:
            stream = self._stream(self._lane(batch.worker)[0])
            share = node_processes(max(self.dealt_to, len(self.plans)), self.world_size)
            ahead = self._ahead[batch.worker] = stream.read_ahead(
                self._reader, functools.partial(self._span, batch.worker), share=share)
        _, _, per_pass = self._lane(batch.worker)
        snap, k = self._snapshot, batch.epoch * per_pass + batch.index // self.dealt_to
        ahead.before(k, (snap.cache_pos[rows], snap.sample_ids[rows]))

    def _read_part(self, part: tuple[np.ndarray, np.ndarray]) -> list[bytes]:
        return self._reader.read_many(*part)

    def read(self, rows: np.ndarray) -> list[CachedSample]:
        """The samples of active-snapshot ``rows`` (payload, metadata dict, cache_id, sample_id)."""
        self._open()
        snap = self._snapshot
        cache_pos, sample_ids = snap.cache_pos[rows], snap.sample_ids[rows]
        if self._pool is None or len(rows) < 2 * self.native_num_workers:
            data = self._reader.read_many(cache_pos, sample_ids)
        else:
            parts = np.array_split(np.arange(len(rows)), self.native_num_workers)
            data = [d for chunk in self._pool.map([(cache_pos[p], sample_ids[p]) for p in parts]) for d in chunk]
        return samples_of(data, *snap.meta_values(rows), snap.cache_ids[rows], sample_ids)

    records_stages = True  # called as fetcher(batch, times) when statistics are on (torch_drt._stage_clock)

    def __call__(self, batch: StreamBatch, times: BatchTimes | None = None) -> Fetched:
        if self.events is not None:
            self.events.on_batch(batch, self.stream(batch))
        rows = self.rows(batch)
        if self._remote:
            self._read_ahead(batch, rows)
        indices = rows.tolist()
        token = enter_batch(self.seed, batch.epoch, indices, batch.positions)
        try:
            t0 = perf_counter_ns() if times is not None else 0
            samples = self.read(rows)
            if times is not None:
                t0 = _lap(times, "dataset", t0, len(samples))
            items = samples if self.transform is None else map_items(self.transform, None, samples, batch.positions)
            if times is not None and self.transform is not None:
                t0 = _lap(times, "transform", t0, len(items))
            out = self.collate_fn(items)
            if times is not None:
                _lap(times, "collate", t0, len(items))
        finally:
            exit_batch(token)
        if self.pin:
            from torch.utils.data._utils.pin_memory import pin_memory

            out = pin_memory(out)
        return out, indices, batch.last


def _lap(times: BatchTimes, stage: str, start_ns: int, items: int) -> int:
    """Add the time since ``start_ns`` to ``stage``; the time now."""
    now = perf_counter_ns()
    times.add(stage, now - start_ns, items)
    return now
