"""``CachedDataset.to_torch_dataloader``: dataset-rt's finite, resumable torch loader over a cache.

Built from the same pipeline as ``torch_drt.StatefulDataLoader``: a planner yields this rank's stream batches in
delivery order, the cache's ``RowFetcher`` loads them on loading processes or inline, and batches come back
through the shared-memory transport, pinned as they are unpacked. torch_drt's datasets read one stream per rank
whose batches are dealt to the loading processes in turn (``DealtPlanner``: the rows do not depend on
``num_workers``); ``torch_drt.compat.dataset_rt``'s give each process its own stream, delivered in torch's
round-robin order (``StreamPlanner``), as dataset-rt does.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from torch_drt._cpu_budget import resolve_worker_counts
from torch_drt._scratch import ScratchDir
from torch_drt.cache.layout import backend_of
from torch_drt.cache.loader._autotune import tune_request
from torch_drt.cache.loader._consumer import RowFetcher
from torch_drt.cache.loader._events import ReaderEvents, log_ready
from torch_drt.cache.loader._loader_options import (
    MAX_SAMPLE_BUDGET,
    LoaderOptions,
    check_dataloader_kwargs,
    check_picklable,
)
from torch_drt.cache.loader._loader_style import PER_RANK, PER_WORKER, loader_style
from torch_drt.cache.loader._snapshot import Snapshot, export_snapshot
from torch_drt.cache.loader._stream_mode import StreamMode, batches_in_flight
from torch_drt.cache.loader._window_tune import AUTO, WindowTune, WindowTuned
from torch_drt.loader.base import PipelineLoader
from torch_drt.loader.worker_info import WorkerStart, base_seed
from torch_drt.sampling.budget import consumer_plans
from torch_drt.sampling.shard_order import check_equal_weights
from torch_drt.sampling.topology import resolve_topology

if TYPE_CHECKING:
    from torch_drt.cache.dataset import CachedDataset
    from torch_drt.loader._autotune_request import AutotuneRequest


SNAPSHOT = "meta.arrow"  # the snapshot the loading processes map
_PROPERTIES = ("seed", "native_num_workers")  # settings the loader reads from its pipeline

class CacheDataLoader(WindowTuned, PipelineLoader):
    """The cache's torch loader: a ``torchdata`` ``StatefulDataLoader`` whose checkpoint is (pass, batches done).

    Build it with ``CachedDataset.to_torch_dataloader``. ``state_dict()`` counts delivered batches only and
    records the settings that make the streams (world size, budget, batch size, shuffle, sampling, seed,
    partition, the streams' layout, the table's fingerprint); ``load_state_dict`` refuses a state of other
    settings with a ``ValueError`` naming them (a world-size change changes the streams; a worker-count change
    does too for ``torch_drt.compat.dataset_rt``'s per-worker streams only). With ``num_workers="tune"`` the
    checkpoint keeps the processes and batches ahead chosen too (``"autotune"``), and a resume runs them; with
    ``shard_window="auto"``, the window of the epoch (``"shard_window_auto"``).
    """

    _mode: StreamMode
    worker_method = "process"
    prefetch_depth: int | None = None  # batches ahead beyond the processes, as num_workers="tune" sets them

    def __init__(
        self, dataset: CachedDataset, mode: StreamMode, settings: dict[str, Any], workdir: Path,
        scratch: ScratchDir | None, autotune: AutotuneRequest | None = None, window_tune: WindowTune | None = None,
    ) -> None:
        self.__dict__.update({key: value for key, value in settings.items() if key not in _PROPERTIES})
        self.dataset = dataset
        self.snapshot_path = str(workdir / SNAPSHOT)
        self._window_tune = window_tune
        self._setup_pipeline(mode, True if autotune or window_tune else None)  # the tuners read the statistics
        self._autotune = None if autotune is None else autotune.autotune(self)
        self._scratch = scratch  # a temporary directory goes with the loader; a work_dir export is the caller's

    @property
    def in_flight(self) -> int:
        """Batches loading at most: ``num_workers * prefetch_factor``, or ``num_workers + prefetch_depth`` tuned."""
        return batches_in_flight(self.num_workers, self.prefetch_factor, self.prefetch_depth)

    @property
    def native_num_workers(self) -> int:
        """Reader threads per loading process: as given, or ``"auto"``'s for the processes running now (dataset-rt's
        budget, recomputed when ``num_workers="tune"`` changes them)."""
        return self._mode.fetcher.native_num_workers

    @property
    def seed(self) -> int:  # type: ignore[override]
        """The sampling seed: the one given or drawn, or a checkpoint's once a ``seed="random"`` loader adopted it."""
        return self._mode.seed

    def _start_workers(self, epoch: int) -> None:
        """Loading processes start as torch's workers do: ``get_worker_info()`` set (its ``dataset`` is None: they
        read rows through the snapshot), the global generators seeded from the loader's seed and the epoch they
        start in, then ``worker_init_fn(worker_id)``."""
        self._mode.mapper.worker_init = WorkerStart(
            self.num_workers, base_seed(self.seed, epoch), None, self.worker_init_fn, "process"
        )

    def worker_pids(self) -> list[int]:
        """The loading processes' pids (empty before the first ``iter()`` and without loading processes)."""
        return self._mode.mapper.worker_pids()


def _reader_threads(asked: int | Literal["auto"], world_size: int, processes: int) -> int:
    """``native_num_workers`` of a rank's ``processes`` loading processes: as ``asked``, or dataset-rt's budget."""
    return resolve_worker_counts(processes, asked, world_size).native_threads


class _Default:
    """An argument left out: the dataset's ``loader_defaults`` decide (torch_drt's or dataset-rt's)."""

    def __repr__(self) -> str:
        return "<the dataset's default>"


DEFAULT: Any = _Default()


_RESTART_WARNING = (
    "persistent_workers=False restarts the loader's consumers on every pass with the same sampling seed and reset "
    "draw offset or sequential cursor. With unchanged metadata, each epoch repeats the same sample sequence, "
    "including when seed='random'. Short epochs can repeatedly omit the rest of the population. Set "
    "persistent_workers=True to continue sampling across epochs."
)


def _workdir(dataset: CachedDataset, work_dir: str | Path | None) -> tuple[Path, ScratchDir | None]:
    """The loader's directory, holding its snapshot: under ``work_dir`` (kept), else a temporary one (removed with
    the loader, or by a later loader once this process is gone: ``ScratchDir``)."""
    scratch = None if work_dir is not None else ScratchDir("torch_drt-loader-")
    workdir = Path(tempfile.mkdtemp(prefix="torch_drt-loader-", dir=work_dir)) if scratch is None else scratch.path
    try:
        export_snapshot(dataset.active, [layout.cache_id for layout in dataset.layouts], workdir / SNAPSHOT)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        if scratch is not None:
            scratch.close()
        raise
    return workdir, scratch


def to_torch_dataloader(
    dataset: CachedDataset,
    *,
    shuffle: bool = DEFAULT,
    seed: int | Literal["random"] = DEFAULT,
    sampling: Literal["permutation", "weighted"] | None = None,
    samples_per_epoch: int | None = None,
    worker_partition: Literal["split", "replicate"] | None = None,
    work_dir: str | Path | None = None,
    batch_size: int = 1,
    num_workers: int | Literal["auto"] = "auto",
    sample_transform_fn: Callable[[Any], Any] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    drop_last: bool = False,
    pin_memory: bool = False,
    timeout: float = 0,
    native_num_workers: int | Literal["auto"] = "auto",
    multiprocessing_context: str | BaseContext | None = DEFAULT,
    worker_init_fn: Callable[[int], None] | None = None,
    prefetch_factor: int | Literal["auto"] = "auto",
    persistent_workers: bool | Literal["auto"] = "auto",
    verbose: bool = DEFAULT,
    dataloader_kwargs: Mapping[str, Any] | None = None,
    shard_window: int | Literal["auto"] | None = None,
    autotune_memory_cap: int | None = None,
) -> CacheDataLoader:
    """Build a finite torch loader over the dataset's active table (see ``CachedDataset.to_torch_dataloader``)."""
    from torch.utils.data import default_collate

    from torch_drt.loader.device import resolve_pin_memory

    check_dataloader_kwargs(dataloader_kwargs)
    style = loader_style(dataset.loader_defaults)
    # num_workers="tune" (torch_drt's datasets; compat ones refuse it with dataset-rt's message): start at one process
    tune = tune_request(num_workers if style.streams == PER_RANK else None, prefetch_factor, autotune_memory_cap)
    num_workers = num_workers if tune is None else tune.start.workers
    if shuffle is DEFAULT:
        shuffle = dataset.reader_config.shuffle if style.shuffle is None else style.shuffle
    seed_given = seed is not DEFAULT
    if not seed_given:
        seed = dataset.reader_config.seed if style.seed is None else style.seed
    if multiprocessing_context is DEFAULT or (multiprocessing_context is None and style.streams == PER_RANK):
        multiprocessing_context = style.context  # torch's None is the platform's default: "inherit"
    # fmt: off
    options = LoaderOptions(
        shuffle=shuffle, seed=seed, seed_given=seed_given, samples_per_epoch=samples_per_epoch,
        worker_partition=worker_partition, batch_size=batch_size, num_workers=num_workers,
        native_num_workers=native_num_workers, drop_last=drop_last, pin_memory=pin_memory,
        persistent_workers=persistent_workers, timeout=timeout, multiprocessing_context=multiprocessing_context,
        prefetch_factor=prefetch_factor, verbose=style.verbose if verbose is DEFAULT else verbose, work_dir=work_dir,
        shard_window=shard_window, sampling=sampling,
    )
    # fmt: on
    rank, world_size = resolve_topology()
    workers = options.resolve_workers(world_size)
    processes = workers.counts.processes
    forked = workers.context is not None and workers.context.get_start_method() == "fork"
    if style.streams == PER_WORKER or not forked:  # forked processes inherit the functions, as torch's workers do
        check_picklable(processes, sample_transform_fn=sample_transform_fn, collate_fn=collate_fn)
    if processes and not workers.persistent:
        warnings.warn(_RESTART_WARNING, UserWarning, stacklevel=3)
    samples = len(dataset) if samples_per_epoch is None else samples_per_epoch
    if not 1 <= samples <= MAX_SAMPLE_BUDGET:
        raise ValueError(f"inherited samples_per_epoch must be between 1 and {MAX_SAMPLE_BUDGET}")
    seed = options.resolved_seed((rank, world_size))
    config = dataset.reader_config
    sampling, window = options.order(config.sampling, config.shard_window, dataset.sampling_default)
    if window is not None:
        check_equal_weights(dataset.active.weights)
    elif sampling == "permutation":
        check_equal_weights(dataset.active.weights, "shuffle=True (sampling='permutation')")
    consumers = processes if style.streams == PER_WORKER else 1  # per rank: its batches are dealt to the processes
    # fmt: off
    plans = consumer_plans(len(dataset.active), samples=samples, batch_size=batch_size, workers=consumers,
                           world_size=world_size, rank=rank, partition=options.partition, drop_last=drop_last)
    # fmt: on
    tuner = WindowTune.of(dataset, consumers, world_size) if window == AUTO else None
    pin = resolve_pin_memory(pin_memory)
    continue_streams = workers.persistent or processes == 0
    # fmt: off
    events = None if not options.verbose else ReaderEvents(
        style.logger, plans, seed=seed, native_threads=workers.counts.native_threads, persistent=continue_streams,
        inline=processes == 0)
    # fmt: on
    workdir, scratch = _workdir(dataset, work_dir)
    fetcher = RowFetcher(
        [backend_of(layout) for layout in dataset.layouts],  # a URL's backend carries its options to the processes
        str(workdir / SNAPSHOT),
        plans=plans,
        shuffle=shuffle,
        seed=seed,
        partition=options.partition,
        transform=sample_transform_fn,
        collate_fn=collate_fn or default_collate,
        native_num_workers=workers.counts.native_threads,
        pin=pin and processes == 0,
        events=events,
        shard_window=cast("int | None", window) if tuner is None else tuner.window,  # no tuner: not "auto"
        world_size=world_size,
        batch_size=batch_size,
        continue_streams=continue_streams,
        reader=dataset.reader,
        snapshot=Snapshot(workdir / SNAPSHOT) if processes == 0 else None,  # read inline: mapped once, now
        sampling=sampling or "permutation",
        dealt_to=max(1, processes) if style.streams == PER_RANK else 1,
    )
    settings = dict(
        batch_size=batch_size,
        num_workers=processes,
        native_num_workers=workers.counts.native_threads,
        shuffle=shuffle,
        sampling=sampling,
        seed=seed,
        worker_partition=options.partition,
        shard_window=window,
        streams=style.streams,
        drop_last=drop_last,
        pin_memory=pin,
        timeout=timeout,
        multiprocessing_context=workers.context,
        persistent_workers=workers.persistent,
        continue_streams=continue_streams,
        prefetch_factor=workers.prefetch_factor if tune is None else None,
        prefetch_depth=None if tune is None else tune.start.depth,
        worker_init_fn=worker_init_fn,
        collate_fn=fetcher.collate_fn,
        sample_transform_fn=sample_transform_fn,
        samples_per_epoch=samples,
        rank=rank,
        world_size=world_size,
        verbose=options.verbose,
        work_dir=workdir if work_dir is not None else None,
    )
    mode = StreamMode(fetcher, settings, fingerprint=dataset.active.fingerprint, seed_given=not options.random_seed,
                      reader_threads=functools.partial(_reader_threads, native_num_workers, world_size))
    loader = CacheDataLoader(dataset, mode, settings, workdir, scratch, autotune=tune,
                             window_tune=tuner)
    if events is not None:
        log_ready(style.logger, loader, plans, dataset.reader_config.prefetch_size)
        events.empty()
    return loader
