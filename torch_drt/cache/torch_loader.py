"""``CachedDataset.to_torch_dataloader``: dataset-rt's finite, resumable torch loader over a cache."""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch_drt.cache._consumer import CacheBatches, export_snapshot
from torch_drt.cache._transport import RingReader
from torch_drt.sampling.budget import rank_budget, worker_batches

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from torch_drt.cache.dataset import CachedDataset

__all__ = ["to_torch_dataloader"]

_EXPLICIT = frozenset(
    {
        "sample_transform_fn",
        "collate_fn",
        "batch_size",
        "samples_per_epoch",
        "num_workers",
        "native_num_workers",
        "shuffle",
        "seed",
        "worker_partition",
        "drop_last",
        "pin_memory",
        "timeout",
        "multiprocessing_context",
        "persistent_workers",
        "prefetch_factor",
        "worker_init_fn",
        "shard_window",
        "dataset",
        "sampler",
        "batch_sampler",
    }
)


def _identity(batch: Any) -> Any:
    return batch


class _Unpacking:
    """The loader's iterator, with batch tensors copied out of the workers' shared-memory rings."""

    def __init__(self, iterator: Any, reader: RingReader) -> None:
        self._iterator, self._reader = iterator, reader

    def __iter__(self) -> _Unpacking:
        return self

    def __next__(self) -> Any:
        return self._reader.unpack(next(self._iterator))

    def __len__(self) -> int:
        return len(self._iterator)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._iterator, name)


def _loader_class() -> type:
    from torchdata.stateful_dataloader import StatefulDataLoader

    class CacheDataLoader(StatefulDataLoader):
        """torchdata's StatefulDataLoader whose workers hand batches over through shared-memory rings."""

        def __iter__(self) -> Any:
            iterator = super().__iter__()
            if self.num_workers == 0:
                return iterator
            if not hasattr(self, "_ring_reader"):
                self._ring_reader = RingReader()
            return _Unpacking(iterator, self._ring_reader)

    return CacheDataLoader


def _topology() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _common_seed(world_size: int) -> int:
    """A random seed every rank agrees on (rank zero draws it and broadcasts it)."""
    values = [secrets.randbits(63)]
    if world_size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(values, src=0)
    return int(values[0])


def _auto_workers(value: int | str, name: str, auto: int) -> int:
    if value == "auto":
        return auto
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "native_num_workers" else 0):
        raise ValueError(f"{name}={value!r} must be 'auto' or an int >= {1 if name == 'native_num_workers' else 0}")
    return value


def to_torch_dataloader(
    dataset: CachedDataset,
    *,
    sample_transform_fn: Callable[[Any], Any] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    batch_size: int = 1,
    samples_per_epoch: int | None = None,
    num_workers: int | Literal["auto"] = 0,
    native_num_workers: int | Literal["auto"] = 1,
    shuffle: bool | None = None,
    seed: int | Literal["random"] | None = None,
    worker_partition: Literal["split", "replicate"] | None = None,
    drop_last: bool = False,
    pin_memory: bool = False,
    timeout: float = 0,
    multiprocessing_context: str | None = "spawn",
    persistent_workers: bool | None = None,
    prefetch_factor: int | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
    dataloader_kwargs: Mapping[str, Any] | None = None,
    shard_window: int | None = None,
) -> StatefulDataLoader:
    """Build a finite torch loader over the dataset's active table (see ``CachedDataset.to_torch_dataloader``)."""
    from torch.utils.data import default_collate

    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{batch_size=} must be an int > 0")
    num_workers = _auto_workers(num_workers, "num_workers", 0 if (os.cpu_count() or 1) <= 2 else 2)
    native_num_workers = _auto_workers(native_num_workers, "native_num_workers", 1)
    shuffle = dataset.reader_config.shuffle if shuffle is None else bool(shuffle)
    if seed is not None and seed != "random" and not shuffle:
        raise ValueError(f"{seed=} requires shuffle=True; sequential reading has no seed")
    shard_window = dataset.reader_config.shard_window if shard_window is None else shard_window
    if shard_window is not None and (not isinstance(shard_window, int) or shard_window < 1):
        raise ValueError(f"{shard_window=} must be None or an int >= 1")
    partition = worker_partition or ("replicate" if shuffle else "split")
    if partition not in ("split", "replicate"):
        raise ValueError(f"{worker_partition=} must be 'split' or 'replicate'")
    extra = dict(dataloader_kwargs or {})
    clashes = sorted(set(extra) & _EXPLICIT)
    if clashes:
        raise ValueError(f"dataloader_kwargs may not set {clashes}: pass them as arguments of to_torch_dataloader")
    if num_workers > 0:
        for name, fn in (("sample_transform_fn", sample_transform_fn), ("collate_fn", collate_fn)):
            try:
                pickle.dumps(fn)
            except Exception as e:
                raise TypeError(
                    f"{name} must be picklable for loading processes (num_workers={num_workers}): define it at "
                    f"module level ({e})"
                ) from e
    rank, world_size = _topology()
    samples = len(dataset) if samples_per_epoch is None else samples_per_epoch
    local = rank_budget(samples, world_size=world_size, rank=rank, batch_size=batch_size, drop_last=drop_last)
    workers = max(1, num_workers)
    if seed == "random":
        seed = _common_seed(world_size)
    elif seed is None:
        seed = dataset.reader_config.seed
    workdir = Path(tempfile.mkdtemp(prefix="torch_drt_loader_"))
    snapshot = export_snapshot(dataset.active, [layout.cache_id for layout in dataset.layouts], workdir / "meta.arrow")
    iterable = CacheBatches(
        [layout.backend for layout in dataset.layouts],  # a URL's backend carries its options to the workers
        str(snapshot),
        plans=worker_batches(local, workers=workers, batch_size=batch_size),
        rank=rank,
        world_size=world_size,
        workers=workers,
        shuffle=shuffle,
        seed=int(seed),
        partition=partition,
        transform=sample_transform_fn,
        collate_fn=default_collate if collate_fn is None else collate_fn,
        native_num_workers=native_num_workers,
        transport_slots=2 * (prefetch_factor or 2) + 2 if num_workers > 0 else 0,
        shard_window=shard_window if shuffle else None,
    )
    options: dict[str, Any] = {
        "batch_size": None,
        "collate_fn": _identity,
        "pin_memory": pin_memory,
        "timeout": timeout,
        "worker_init_fn": worker_init_fn,
    }
    if num_workers > 0:
        options.update(
            num_workers=num_workers,
            multiprocessing_context=multiprocessing_context,
            persistent_workers=True if persistent_workers is None else persistent_workers,
        )
        if prefetch_factor is not None:
            options["prefetch_factor"] = prefetch_factor
    loader = _loader_class()(iterable, **options, **extra)
    weakref.finalize(iterable, shutil.rmtree, workdir, True)  # the iterable outlives every iterator
    return loader
