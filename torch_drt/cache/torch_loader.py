"""``CachedDataset.to_torch_dataloader``: dataset-rt's finite, resumable torch loader over a cache.

Built from the same pipeline as ``torch_drt.StatefulDataLoader``: a ``StreamPlanner`` yields this rank's
consumers' stream batches in torch's round-robin order, the cache's ``RowFetcher`` loads them on loading
processes (consumer ``w``'s batches on process ``w``) or inline, and batches come back through the shared-memory
transport, pinned as they are unpacked.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import secrets
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch_drt.cache._consumer import RowFetcher, export_snapshot
from torch_drt.cache._stream_mode import StreamMode
from torch_drt.loader.base import PipelineLoader
from torch_drt.loader.dataloader import check_workers
from torch_drt.sampling.budget import consumer_plans
from torch_drt.sampling.topology import resolve_topology

if TYPE_CHECKING:
    from torch_drt.cache.dataset import CachedDataset

__all__ = ["CacheDataLoader", "to_torch_dataloader"]

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
        "dataset",
        "sampler",
        "batch_sampler",
    }
)
_HONOURED = {"in_order": (True,), "snapshot_every_n_steps": None}  # torch keywords with a meaning here


class CacheDataLoader(PipelineLoader):
    """The cache's torch loader: a ``torchdata`` ``StatefulDataLoader`` whose checkpoint is (pass, batches done).

    Build it with ``CachedDataset.to_torch_dataloader``. ``state_dict()`` counts delivered batches only and
    records the settings that make the streams (world size, loading workers, budget, batch size, shuffle, seed,
    partition, the table's fingerprint); ``load_state_dict`` refuses a state of other settings with a
    ``ValueError`` naming them (a world-size or worker-count change changes the consumers' streams).
    """

    def __init__(self, dataset: CachedDataset, mode: StreamMode, settings: dict[str, Any], workdir: Path) -> None:
        self.__dict__.update(settings)
        self.dataset = dataset
        self.snapshot_path = str(workdir / "meta.arrow")
        self._setup_pipeline(mode)
        weakref.finalize(self, shutil.rmtree, str(workdir), True)  # holds the path only

    def worker_pids(self) -> list[int]:
        """The loading processes' pids (empty before the first ``iter()`` and without loading processes)."""
        return self._mode.mapper.worker_pids()


def _common_seed(world_size: int) -> int:
    """A random seed every rank agrees on (rank zero draws it and broadcasts it)."""
    values = [secrets.randbits(63)]
    if world_size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(values, src=0)
    return int(values[0])


def _count(value: Any, name: str, low: int, auto: int) -> int:
    if value == "auto":
        return auto
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r} must be 'auto' or an int >= {low}")
    return value


def _check_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """dataset-rt's ``dataloader_kwargs``: collisions refused; torch keywords without a meaning here refused."""
    extra = dict(kwargs or {})
    clashes = sorted(set(extra) & _EXPLICIT)
    if clashes:
        raise ValueError(f"dataloader_kwargs may not set {clashes}: pass them as arguments of to_torch_dataloader")
    unknown = sorted(set(extra) - set(_HONOURED))
    if unknown:
        raise ValueError(f"dataloader_kwargs {unknown} are not supported by torch_drt's cache loader")
    if "in_order" in extra and extra["in_order"] is not True:
        raise ValueError("in_order=False is not supported: batches are always delivered in order")
    return extra


def _check_callables(num_workers: int, **fns: Any) -> None:
    if num_workers > 0:
        for name, fn in fns.items():
            try:
                pickle.dumps(fn)
            except Exception as e:
                raise TypeError(
                    f"{name} must be picklable for loading processes (num_workers={num_workers}): define it at "
                    f"module level ({e})"
                ) from e


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
) -> CacheDataLoader:
    """Build a finite torch loader over the dataset's active table (see ``CachedDataset.to_torch_dataloader``)."""
    from torch.utils.data import default_collate

    from torch_drt.loader.device import resolve_pin_memory

    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"{batch_size=} must be an int > 0")
    num_workers = check_workers(_count(num_workers, "num_workers", 0, 0 if (os.cpu_count() or 1) <= 2 else 2))
    native_num_workers = check_workers(_count(native_num_workers, "native_num_workers", 1, 1))
    shuffle = dataset.reader_config.shuffle if shuffle is None else bool(shuffle)
    if seed is not None and seed != "random" and not shuffle:
        raise ValueError(f"{seed=} requires shuffle=True; sequential reading has no seed")
    if seed not in (None, "random") and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64
    ):
        raise ValueError(f"{seed=} must be 'random' or an int in [0, 2**64)")
    partition = worker_partition or ("replicate" if shuffle else "split")
    if partition not in ("split", "replicate"):
        raise ValueError(f"{worker_partition=} must be 'split' or 'replicate'")
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"{timeout=} must be a finite number >= 0")
    if timeout and num_workers == 0:
        raise ValueError(f"{timeout=} needs num_workers > 0 (as in dataset-rt)")
    if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
        raise ValueError(f"{prefetch_factor=} must be an int > 0")
    if num_workers and multiprocessing_context not in (None, *multiprocessing.get_all_start_methods()):
        raise ValueError(f"{multiprocessing_context=} must be one of {multiprocessing.get_all_start_methods()}")
    _check_options(dataloader_kwargs)
    _check_callables(num_workers, sample_transform_fn=sample_transform_fn, collate_fn=collate_fn)
    rank, world_size = resolve_topology()
    samples = len(dataset) if samples_per_epoch is None else samples_per_epoch
    seed_given = seed not in (None, "random")
    seed = _common_seed(world_size) if seed == "random" else dataset.reader_config.seed if seed is None else seed
    # fmt: off
    plans = consumer_plans(len(dataset.active), samples=samples, batch_size=batch_size, workers=num_workers,
                           world_size=world_size, rank=rank, partition=partition, drop_last=drop_last)
    # fmt: on
    persistent = True if persistent_workers is None else bool(persistent_workers)
    if num_workers and not persistent:
        warnings.warn(
            "persistent_workers=False restarts the consumers' streams every pass: with unchanged metadata "
            "each pass repeats the first one (as in dataset-rt)",
            UserWarning,
            stacklevel=3,
        )
    pin = resolve_pin_memory(pin_memory)
    workdir = Path(tempfile.mkdtemp(prefix="torch_drt_loader_"))
    snapshot = export_snapshot(dataset.active, [layout.cache_id for layout in dataset.layouts], workdir / "meta.arrow")
    fetcher = RowFetcher(
        [str(p) for p in dataset.cache_paths],
        str(snapshot),
        plans=plans,
        shuffle=shuffle,
        seed=int(seed),
        partition=partition,
        transform=sample_transform_fn,
        collate_fn=collate_fn or default_collate,
        native_num_workers=native_num_workers,
        pin=pin and num_workers == 0,
    )
    settings = dict(
        batch_size=batch_size,
        num_workers=num_workers,
        native_num_workers=native_num_workers,
        shuffle=shuffle,
        seed=int(seed),
        worker_partition=partition,
        drop_last=drop_last,
        pin_memory=pin,
        timeout=timeout,
        multiprocessing_context=multiprocessing_context,
        persistent_workers=persistent,
        prefetch_factor=prefetch_factor or 2,
        worker_init_fn=worker_init_fn,
        collate_fn=fetcher.collate_fn,
        sample_transform_fn=sample_transform_fn,
        samples_per_epoch=samples,
        rank=rank,
        world_size=world_size,
    )
    mode = StreamMode(fetcher, settings, fingerprint=dataset.active.fingerprint, seed_given=seed_given)
    return CacheDataLoader(dataset, mode, settings, workdir)
