"""torch_drt.StatefulDataLoader: threads or processes, ranks, exact resume across topology changes."""

from __future__ import annotations

import pickle
import warnings
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import torch
from torchdata.nodes import BaseNode
from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader

from torch_drt.loader._device import resolve_device, resolve_pin_memory
from torch_drt.loader._fetch import BatchFetcher, EventLoopThread, default_collate, is_async_dataset
from torch_drt.loader._iterator import LoaderIterator, LoaderPosition
from torch_drt.loader._node_mode import node_iter, node_state_dict, setup_node_mode
from torch_drt.nodes.batch_plan import BatchPlanner
from torch_drt.nodes.ordered_map import OrderedMapper
from torch_drt.sampling.partition import Partition
from torch_drt.sampling.samplers import IndexListSampler, PositionSampler, SequentialSampler, ShuffledSampler

__all__ = ["StatefulDataLoader"]


def _default_topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    dist = torch.distributed
    initialised = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    return rank, world_size


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int > 0")


def _close(mapper: OrderedMapper, loop: EventLoopThread | None, aclose: Callable[[], Any] | None) -> None:
    mapper.close()
    if loop is not None:
        loop.stop(aclose)


class StatefulDataLoader(_TorchdataLoader):
    """A ``torchdata`` ``StatefulDataLoader`` built on torchdata nodes, whose checkpoint is a global position.

    Global batch b covers global positions [b*G, (b+1)*G) with G = ``batch_size * world_size``; rank r takes
    positions r, r+W, r+2W, ... within it. Positions map to indices through a sampler: identity, a keyed
    permutation of (dataset size, seed, epoch) when shuffled, or a user ``sampler`` read at each epoch start.
    ``state_dict()`` counts batches delivered to the caller only, and resumes exactly under another batch
    size, world size, number of workers or worker method.

    Args:
        dataset: a map-style dataset (``__len__``, ``__getitem__``, optional ``__getitems__``); its
            ``__getitem__`` may be ``async def`` (run on one event loop per loader, with an optional
            ``async def aclose()`` awaited once when the loader is closed or dropped). Or a torchdata node
            (``torch_drt.nodes.CacheReaderNode`` over a ``CacheSampler``, say): its items are batched in its own
            order and the checkpoint holds the node's state (no shuffle, sampler or rank striding: the node
            decides), so a resume may change the batch size or the workers.
        batch_size: samples per batch on this rank.
        shuffle: shuffle positions with a keyed permutation, new each epoch.
        sampler: an iterable of indices read whole at each epoch start (not with ``shuffle``).
        num_workers: batches loaded in parallel (0: in the calling thread).
        collate_fn: ``collate_fn(items) -> batch``; default torch's ``default_collate`` (``[]`` when empty).
        drop_last: drop the last global batch when incomplete; else it is padded and the padding removed, so
            a rank may receive ``collate_fn([])``.
        pin_memory: pin batches before a CUDA copy; a no-op with a warning on CPU-only torch.
        multiprocessing_context: start method of process workers (spawn, fork, forkserver).
        timeout: seconds to wait for a batch before ``TimeoutError`` (0: no limit).
        seed: the shuffle seed (only with ``shuffle``); None draws one from torch's RNG.
        worker_method: ``"thread"`` (default) or ``"process"``.
        item_concurrency: items of one batch fetched at once.
        prefetch_depth: batches loaded ahead beyond the ``num_workers`` in progress.
        transform: ``transform(index, item) -> item`` on the workers, before ``collate_fn``.
        return_indices: yield ``(batch, indices)``.
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
        device: copy batches to this device (non-blocking after pinning).
        persistent_workers: accepted for compatibility; workers always persist across epochs.
        generator: a torch Generator the default seed is drawn from.
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = BatchPlanner.EPOCH_KEY
    OFFSET_KEY = BatchPlanner.OFFSET_KEY
    SHUFFLE_KEY = "shuffle"
    SEED_KEY = "shuffle_seed"
    DROP_LAST_KEY = "drop_last"
    BATCH_SIZE_KEY = "batch_size"
    WORLD_SIZE_KEY = "world_size"
    NUM_SAMPLES_KEY = "num_samples"

    multiprocessing_context: Any = None  # a plain attribute here, not DataLoader's validating property

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        pin_memory: bool = False,
        multiprocessing_context: str | None = None,
        timeout: float = 0,
        *,
        seed: int | None = None,
        worker_method: Literal["thread", "process"] = "thread",
        item_concurrency: int = 1,
        prefetch_depth: int = 2,
        transform: Callable[[int, Any], Any] | None = None,
        return_indices: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        device: str | torch.device | None = None,
        persistent_workers: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        _check_positive(batch_size=batch_size, prefetch_depth=prefetch_depth, item_concurrency=item_concurrency)
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"{num_workers=} must be an int >= 0")
        if seed is not None and not shuffle:
            raise ValueError(f"{seed=} is only allowed with shuffle=True")
        if shuffle and sampler is not None:
            raise ValueError("shuffle=True cannot be combined with a sampler")
        if worker_method not in ("thread", "process"):
            raise ValueError(f"{worker_method=} must be 'thread' or 'process'")
        if timeout < 0:
            raise ValueError(f"{timeout=} must be >= 0")
        self._node_mode = isinstance(dataset, BaseNode)
        if not self._node_mode and (not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"dataset must be map-style (__len__ and __getitem__) or a torchdata node, got {type(dataset).__name__}"
            )
        self.rank, self.world_size = _default_topology(rank, world_size)
        Partition(0, batch_size, self.world_size, self.rank)  # validates rank and world size
        dataset_len = 0 if self._node_mode else len(dataset)
        if drop_last and sampler is None and not self._node_mode and dataset_len < batch_size * self.world_size:
            raise ValueError(
                f"the dataset has {dataset_len} samples, fewer than one global batch "
                f"(batch_size={batch_size} x world_size={self.world_size}) and drop_last=True leaves nothing"
            )
        if shuffle and seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item()) & ((1 << 63) - 1)
            self._seed_given = False
        else:
            self._seed_given = True
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = None
        self.num_workers = num_workers
        self.drop_last = drop_last
        self.seed = seed
        self.worker_method = worker_method
        self.item_concurrency = item_concurrency
        self.prefetch_depth = prefetch_depth
        self.transform = transform
        self.return_indices = return_indices
        self.timeout = timeout
        self.persistent_workers = persistent_workers
        self.multiprocessing_context = multiprocessing_context
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.pin_memory = resolve_pin_memory(pin_memory)
        self._device = resolve_device(device)
        self._pos = LoaderPosition()
        self._generation = 0
        self._pending_state: dict[str, Any] | None = None
        if self._node_mode:
            self._node_state: dict[str, Any] | None = None
            setup_node_mode(self, dataset)
            self._finalizer = weakref.finalize(self, _close, self._mapper, None, None)
            return
        self._fetcher = BatchFetcher(dataset, transform, self.collate_fn, item_concurrency, pin=self.pin_memory)
        if worker_method == "process" and num_workers > 0:
            try:
                pickle.dumps(self._fetcher)
            except Exception as e:
                raise TypeError(
                    f"worker_method='process' needs a picklable dataset, transform and collate_fn: {e}"
                ) from e
        self._sampler: PositionSampler = (
            IndexListSampler(sampler, dataset_len)
            if sampler is not None
            else ShuffledSampler(dataset_len, seed)
            if shuffle
            else SequentialSampler(dataset_len)
        )
        self._planner = BatchPlanner(self._sampler, self._partition(self._sampler.n))
        self._mapper = OrderedMapper(
            self._planner,
            self._fetcher,
            num_workers=num_workers,
            in_flight=num_workers + prefetch_depth,
            method=worker_method,
            multiprocessing_context=multiprocessing_context,
            timeout=timeout,
        )
        self._loop = EventLoopThread() if is_async_dataset(dataset) and worker_method == "thread" else None
        self._fetcher.event_loop = self._loop
        aclose = getattr(dataset, "aclose", None)
        self._finalizer = weakref.finalize(self, _close, self._mapper, self._loop, aclose if self._loop else None)

    def _partition(self, n: int) -> Partition:
        return Partition(n, self.batch_size, self.world_size, self.rank, self.drop_last)

    @property
    def global_batch_size(self) -> int:
        """``batch_size * world_size``: samples per step over all ranks."""
        return self.batch_size * self.world_size

    def __len__(self) -> int:
        """This rank's batches per epoch (a sampler without ``__len__`` makes this a ``TypeError``)."""
        if self._node_mode:
            if not hasattr(self.dataset, "__len__"):
                raise TypeError("len(loader) needs a node with __len__")
            n = len(self.dataset)
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.sampler is not None and not hasattr(self.sampler, "__len__"):
            raise TypeError("len(loader) needs a sampler with __len__")
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return self._partition(n).num_batches(0)

    def _remaining(self) -> int:
        return self._planner.partition.num_batches(self._pos.offset)

    def __iter__(self) -> LoaderIterator:
        if self._node_mode:
            return node_iter(self)
        if self._pending_state is not None:
            self._pos.epoch, self._pos.offset = (
                self._pending_state[self.EPOCH_KEY],
                self._pending_state[self.OFFSET_KEY],
            )
            self._pending_state = None
        elif self._pos.active:  # a new iter() during an epoch starts the next epoch, as torch's loader does
            self._pos.epoch, self._pos.offset = self._pos.epoch + 1, 0
        self._generation += 1
        self._sampler.start_epoch(self._pos.epoch)
        self._planner.partition = self._partition(self._sampler.n)
        if self._pos.offset >= self._sampler.n:  # a checkpoint taken at the very end of an epoch
            self._pos.epoch, self._pos.offset = self._pos.epoch + 1, 0
            self._sampler.start_epoch(self._pos.epoch)
            self._planner.partition = self._partition(self._sampler.n)
        if self._loop is not None:
            self._loop.start()
        if self._fetcher.item_pool is None and self.item_concurrency > 1 and self.worker_method == "thread":
            threads = max(1, self.num_workers) * self.item_concurrency  # num_workers x item_concurrency in flight
            self._fetcher.item_pool = ThreadPoolExecutor(threads, thread_name_prefix="torch_drt-item")
            self._item_pool_finalizer = weakref.finalize(self, self._fetcher.item_pool.shutdown, wait=False)
        self._mapper.reset(
            {OrderedMapper.SOURCE_KEY: {self.EPOCH_KEY: self._pos.epoch, self.OFFSET_KEY: self._pos.offset}}
        )
        self._pos.active = True
        return LoaderIterator(self, self._generation)

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable checkpoint of the batches delivered so far (prefetched ones excluded)."""
        if self._node_mode:
            return node_state_dict(self)
        epoch, offset = (
            (self._pending_state[self.EPOCH_KEY], self._pending_state[self.OFFSET_KEY])
            if self._pending_state is not None
            else (self._pos.epoch, self._pos.offset)
        )
        return {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.OFFSET_KEY: offset,
            self.SHUFFLE_KEY: self.shuffle,
            self.SEED_KEY: self.seed,
            self.DROP_LAST_KEY: self.drop_last,
            self.BATCH_SIZE_KEY: self.batch_size,
            self.WORLD_SIZE_KEY: self.world_size,
            self.NUM_SAMPLES_KEY: self._sampler.n,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume at a checkpoint's epoch and global offset, under any batch size, world size or workers.

        A loader whose seed was drawn at random adopts the checkpoint's seed. Otherwise, when shuffle, seed or
        drop_last differ from the checkpoint, a warning says which values were applied (this loader's).

        Raises:
            RuntimeError: when an iterator of this loader is mid-epoch.
            ValueError: when the state lacks the epoch or offset.
        """
        if self._pos.active:
            raise RuntimeError("load_state_dict() while an iterator is active: exhaust or close it first")
        if self._node_mode:
            self._pending_state = dict(state_dict)
            return
        try:
            epoch, offset = int(state_dict[self.EPOCH_KEY]), int(state_dict[self.OFFSET_KEY])
        except (KeyError, TypeError, ValueError) as e:
            keys = f"{self.EPOCH_KEY!r}, {self.OFFSET_KEY!r}"
            raise ValueError(f"not a torch_drt loader state (needs {keys}): {e}") from e
        if epoch < 0 or offset < 0:
            raise ValueError(f"invalid state: {epoch=} {offset=}")
        saved_shuffle, saved_seed = state_dict.get(self.SHUFFLE_KEY), state_dict.get(self.SEED_KEY)
        if self.shuffle and saved_shuffle and not self._seed_given and saved_seed is not None:
            self.seed = int(saved_seed)
            self._sampler = ShuffledSampler(self._sampler.n, self.seed)
            self._planner.source = self._sampler
        differences = [
            f"{key}: checkpoint {state_dict.get(key)!r}, loader {ours!r}"
            for key, ours in (
                (self.SHUFFLE_KEY, self.shuffle),
                (self.SEED_KEY, self.seed),
                (self.DROP_LAST_KEY, self.drop_last),
            )
            if key in state_dict and state_dict[key] != ours
        ]
        if differences:
            warnings.warn(
                "checkpoint settings differ; applied this loader's (" + "; ".join(differences) + f"), resuming at "
                f"epoch {epoch}, global offset {offset}",
                stacklevel=2,
            )
        self._pending_state = {self.EPOCH_KEY: epoch, self.OFFSET_KEY: offset}

    def close(self) -> None:
        """Stop the workers and the event loop (awaiting the dataset's ``aclose()`` once)."""
        self._pos.active = False
        self._finalizer()

    def __del__(self) -> None:  # DataLoader defines none; keep garbage collection quiet
        pass

    @classmethod
    def from_storage(cls, storage: Any, collate_fn: Callable[[list[Any]], Any], **kwargs: Any) -> StatefulDataLoader:
        """Create a loader over a token-stream or document storage with guideloom's keywords.

        See ``torch_drt.storage.from_storage`` for the keywords and their mapping.
        """
        from torch_drt.storage.loading import loader_kwargs_from_storage

        dataset, loader_kwargs = loader_kwargs_from_storage(storage, **kwargs)
        return cls(dataset, collate_fn=collate_fn, **loader_kwargs)
