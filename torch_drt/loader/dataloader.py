"""torch_drt.StatefulDataLoader: threads or processes, ranks, exact resume across topology changes."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torchdata.nodes import BaseNode

from torch_drt.loader._fetch import default_collate
from torch_drt.loader._map_mode import MapMode
from torch_drt.loader._node_mode import NodeMode
from torch_drt.loader.base import PipelineLoader
from torch_drt.loader.device import resolve_device, resolve_pin_memory
from torch_drt.sampling.partition import Partition
from torch_drt.sampling.topology import resolve_topology

__all__ = ["MAX_WORKERS", "StatefulDataLoader"]

MAX_WORKERS = 1024  # one thread or process each: more is a mistake, not a setting


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int > 0")


def check_workers(num_workers: Any) -> int:
    """``num_workers`` if it is an int in ``[0, MAX_WORKERS]``."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or not 0 <= num_workers <= MAX_WORKERS:
        raise ValueError(f"{num_workers=} must be an int in [0, {MAX_WORKERS}]")
    return num_workers


class StatefulDataLoader(PipelineLoader):
    """A ``torchdata`` ``StatefulDataLoader`` built on torchdata nodes, whose checkpoint is a global position.

    Map-style datasets: global batch b covers global positions [b*G, (b+1)*G) with G = ``batch_size *
    world_size``; rank r takes positions r, r+W, r+2W, ... within it. Positions map to indices through a
    sampler: identity, a keyed permutation of (dataset size, seed, epoch) when shuffled, or a user ``sampler``
    read lazily at each epoch. ``state_dict()`` counts batches delivered to the caller only, and resumes exactly
    under another batch size, world size, number of workers or worker method. A torchdata node as the dataset
    switches to node mode: its items are batched in the node's own order and the checkpoint is the node's state.

    Args:
        dataset: a map-style dataset (``__len__``, ``__getitem__``, optional ``__getitems__``); its
            ``__getitem__``/``__getitems__`` may be ``async def`` (run on one event loop per loader, with an
            optional ``async def aclose()`` awaited once when the loader is closed or dropped). Or a torchdata node
            (``torch_drt.nodes.CacheReaderNode`` over a ``CacheSampler``, say): node mode (no shuffle, sampler or
            rank striding: the node decides), so a resume may change the batch size or the workers.
        batch_size: samples per batch on this rank.
        shuffle: shuffle positions with a keyed permutation, new each epoch.
        sampler: an iterable of indices, read lazily from a new iterator at each epoch (not with ``shuffle``).
        num_workers: batches loaded in parallel (0: in the calling thread).
        collate_fn: ``collate_fn(items) -> batch``; default torch's ``default_collate`` (``[]`` when empty).
        drop_last: drop the last global batch when incomplete; else it is padded and the padding removed, so
            a rank may receive ``collate_fn([])``.
        pin_memory: pin batches before a CUDA copy; a no-op with a warning on CPU-only torch.
        multiprocessing_context: start method of process workers (spawn, fork, forkserver).
        timeout: seconds to wait for a batch before ``TimeoutError`` (0: no limit); the batch is abandoned.
        seed: the loader's seed: the shuffle order and the items' random generators (``torch_drt.random``);
            None draws one from torch's RNG (recorded in ``state_dict()``).
        worker_method: ``"thread"`` (default) or ``"process"``.
        item_concurrency: items of one batch fetched at once.
        prefetch_depth: batches loaded ahead beyond the ``num_workers`` in progress.
        transform: ``transform(index, item) -> item`` on the workers, before ``collate_fn``: the dataset index
            (map-style) or the item's position in the node's epoch (node mode).
        return_indices: yield ``(batch, indices)``: dataset indices (map-style) or positions (node mode).
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
        device: copy batches to this device (non-blocking after pinning).
        persistent_workers: accepted for compatibility; workers always persist across epochs.
        generator: a torch Generator the default seed is drawn from.
    """

    VERSION = MapMode.VERSION
    VERSION_KEY = MapMode.VERSION_KEY
    EPOCH_KEY = MapMode.EPOCH_KEY
    OFFSET_KEY = MapMode.OFFSET_KEY
    SHUFFLE_KEY = MapMode.SHUFFLE_KEY
    SEED_KEY = MapMode.SEED_KEY
    DROP_LAST_KEY = MapMode.DROP_LAST_KEY
    BATCH_SIZE_KEY = MapMode.BATCH_SIZE_KEY
    WORLD_SIZE_KEY = MapMode.WORLD_SIZE_KEY
    NUM_SAMPLES_KEY = MapMode.NUM_SAMPLES_KEY
    NODE_KEY = NodeMode.NODE_KEY

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
        check_workers(num_workers)
        if shuffle and sampler is not None:
            raise ValueError("shuffle=True cannot be combined with a sampler")
        if worker_method not in ("thread", "process"):
            raise ValueError(f"{worker_method=} must be 'thread' or 'process'")
        if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f"{timeout=} must be a finite number >= 0")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64):
            raise ValueError(f"{seed=} must be an int in [0, 2**64)")
        node_mode = isinstance(dataset, BaseNode)
        if not node_mode and (not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"dataset must be map-style (__len__ and __getitem__) or a torchdata node, got {type(dataset).__name__}"
            )
        if node_mode and (shuffle or sampler is not None):
            raise ValueError("a node yields its own order: shuffle and sampler apply to map-style datasets")
        self.rank, self.world_size = resolve_topology(rank, world_size)
        whole = Partition(0 if node_mode else len(dataset), batch_size, self.world_size, self.rank, drop_last)
        if drop_last and sampler is None and not node_mode and whole.num_batches() == 0:
            raise ValueError(
                f"the dataset has {len(dataset)} samples, fewer than one global batch "
                f"(batch_size={batch_size} x world_size={self.world_size}) and drop_last=True leaves nothing"
            )
        seed_given = seed is not None
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item()) & ((1 << 63) - 1)
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed
        self.num_workers, self.drop_last, self.timeout = num_workers, drop_last, timeout
        self.worker_method, self.item_concurrency, self.prefetch_depth = worker_method, item_concurrency, prefetch_depth
        self.transform, self.return_indices = transform, return_indices
        self.persistent_workers, self.multiprocessing_context = persistent_workers, multiprocessing_context
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.pin_memory = resolve_pin_memory(pin_memory)
        self._device = resolve_device(device)
        mode = NodeMode(self, dataset) if node_mode else MapMode(self, sampler, seed_given)
        if worker_method == "process" and num_workers > 0:
            try:
                pickle.dumps(mode.mapper.map_fn)
            except Exception as e:
                raise TypeError(
                    f"worker_method='process' needs a picklable dataset, transform and collate_fn: {e}"
                ) from e
        self._setup_pipeline(mode)

    @property
    def global_batch_size(self) -> int:
        """``batch_size * world_size``: samples per step over all ranks."""
        return Partition(0, self.batch_size, self.world_size, self.rank).global_batch_size

    @classmethod
    def from_storage(cls, storage: Any, collate_fn: Callable[[list[Any]], Any], **kwargs: Any) -> StatefulDataLoader:
        """Create a loader over a token-stream or document storage with guideloom's keywords.

        See ``torch_drt.storage.loading.loader_kwargs_from_storage`` for the keywords and their mapping.
        """
        from torch_drt.storage.loading import loader_kwargs_from_storage

        dataset, loader_kwargs = loader_kwargs_from_storage(storage, **kwargs)
        return cls(dataset, collate_fn=collate_fn, **loader_kwargs)
