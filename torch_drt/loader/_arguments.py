"""torch's DataLoader arguments, checked as torch checks them and mapped onto torch_drt's pipeline."""

from __future__ import annotations

import math
import multiprocessing
import warnings
from collections.abc import Callable
from typing import Any

import torch

MAX_WORKERS = 1024  # one thread or process each: more is a mistake, not a setting


def check_positive(**values: Any) -> None:
    """Each value is an int > 0 (not a bool)."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int > 0")


def check_workers(num_workers: Any) -> int:
    """``num_workers`` if it is an int in ``[0, MAX_WORKERS]``."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or not 0 <= num_workers <= MAX_WORKERS:
        raise ValueError(f"{num_workers=} must be an int in [0, {MAX_WORKERS}]")
    return num_workers


def is_iterable_dataset(dataset: Any) -> bool:
    """torch's rule: an ``IterableDataset`` (or an object with ``__iter__`` and no ``__getitem__``); a torchdata
    node is not one (it is node mode's)."""
    from torchdata.nodes import BaseNode

    if isinstance(dataset, BaseNode):
        return False
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return True
    return hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__")


def check_batching(
    dataset: Any, batch_size: Any, shuffle: Any, sampler: Any, batch_sampler: Any, drop_last: bool
) -> None:
    """torch's rules for ``batch_size``, ``shuffle``, ``sampler``, ``batch_sampler`` and ``drop_last``."""
    if batch_size is not None:
        check_positive(batch_size=batch_size)
    if shuffle is not None and not isinstance(shuffle, bool):
        raise ValueError(f"{shuffle=} must be a bool or None")
    if is_iterable_dataset(dataset):
        for name, value in (("shuffle", shuffle or None), ("sampler", sampler), ("batch_sampler", batch_sampler)):
            if value is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified {name} option, but got {name}={value} "
                    "(the dataset decides its order; shuffle inside it, with torch_drt.random.item_generator() "
                    "for a reproducible order)"
                )
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
        raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
    if batch_size is None and drop_last:
        raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
    if shuffle and batch_sampler is None and hasattr(dataset, "__len__") and len(dataset) == 0:
        raise ValueError("num_samples should be a positive integer value, but got num_samples=0")  # RandomSampler's


def start_method(multiprocessing_context: Any) -> str | None:
    """The start method a ``multiprocessing_context`` (a name or a context object) names."""
    if multiprocessing_context is None:
        return None
    if isinstance(multiprocessing_context, str):
        valid = multiprocessing.get_all_start_methods()
        if multiprocessing_context not in valid:
            raise ValueError(
                f"multiprocessing_context option should specify a valid start method in {valid!r}, but got "
                f"multiprocessing_context={multiprocessing_context!r}"
            )
        return multiprocessing_context
    if isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
        return multiprocessing_context.get_start_method()
    raise TypeError(
        "multiprocessing_context option should be a valid context object or a string specifying the start "
        f"method, but got multiprocessing_context={multiprocessing_context!r}"
    )


def worker_method_for(worker_method: Any, multiprocessing_context: Any) -> str:
    """``worker_method``, by default ``"process"`` (torch's workers); ``"thread"`` is an explicit opt-in (with
    it a ``multiprocessing_context`` has nothing to start)."""
    if worker_method is None:
        return "process"
    if worker_method not in ("thread", "process"):
        raise ValueError(f"{worker_method=} must be 'thread' or 'process'")
    return worker_method


def check_thread_workers(worker_method: str, num_workers: int, iterable: bool, worker_init_fn: Any) -> None:
    """Refuse what thread workers cannot do correctly: a ``worker_init_fn`` on an IterableDataset.

    torch's recipe shards an IterableDataset in ``worker_init_fn`` by mutating the worker's own copy of the
    dataset; thread workers share one dataset (iterated once, in the loader's thread), so the workers' edits
    would race and the loader would return an arbitrary subset.
    """
    if worker_method == "thread" and num_workers > 0 and iterable and worker_init_fn is not None:
        raise ValueError(
            "worker_init_fn with an IterableDataset needs a copy of the dataset per worker: thread workers share "
            "one (it is iterated once, in the loader's thread), so per-worker edits would race; use "
            "worker_method=\"process\" (the default), or drop worker_init_fn (with threads every item is "
            "delivered once without sharding)"
        )


def check_worker_arguments(
    num_workers: int,
    timeout: Any,
    worker_init_fn: Any,
    multiprocessing_context: Any,
    prefetch_factor: Any,
    prefetch_depth: Any,
    persistent_workers: Any,
) -> None:
    """torch's rules for the worker arguments, and torch_drt's ``prefetch_depth`` beside ``prefetch_factor``."""
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"{timeout=} must be a finite number >= 0")
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError(f"worker_init_fn must be callable, got {type(worker_init_fn).__name__}")
    if not isinstance(persistent_workers, bool):
        raise ValueError(f"{persistent_workers=} must be a bool")
    if num_workers == 0:
        if prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing. let num_workers > 0 to enable "
                "multiprocessing, otherwise set prefetch_factor to None."
            )
        if persistent_workers:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None:
            raise ValueError(
                "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got "
                f"num_workers={num_workers}"
            )
    if prefetch_factor is not None:
        check_positive(prefetch_factor=prefetch_factor)
        if prefetch_depth is not None:
            raise ValueError(
                f"give prefetch_factor={prefetch_factor} (torch's: batches loaded ahead per worker) or "
                f"prefetch_depth={prefetch_depth} (torch_drt's: batches ahead beyond the workers), not both"
            )
    if prefetch_depth is not None:
        check_positive(prefetch_depth=prefetch_depth)


def check_pin_memory_device(pin_memory: bool, pin_memory_device: Any) -> None:
    """torch's rule: ``pin_memory_device`` is deprecated; with ``pin_memory`` it is ignored with a warning."""
    if not isinstance(pin_memory_device, str):
        raise ValueError(f"{pin_memory_device=} must be a str")
    if pin_memory and pin_memory_device:
        warnings.warn(
            f"pin_memory_device is deprecated, the current accelerator will be used as the device, ignore "
            f"pin_memory_device={pin_memory_device!r}. (torch_drt: device= copies batches to a device)",
            stacklevel=3,
        )


class Unbatched:
    """``batch_size=None`` (torch: no automatic batching): each batch is one item, passed to ``collate_fn``
    alone (default: torch's ``default_convert``). A padded rank's empty batch stays ``[]``."""

    def __init__(self, collate_fn: Callable[[Any], Any] | None) -> None:
        if isinstance(collate_fn, Unbatched):  # a loader re-created from another's attributes (Lightning)
            collate_fn = collate_fn.collate_fn
        self.collate_fn: Callable[[Any], Any] | None = collate_fn

    def __call__(self, items: list[Any]) -> Any:
        if not items:
            return []
        if self.collate_fn is None:
            from torch.utils.data import default_convert

            return default_convert(items[0])
        return self.collate_fn(items[0])

    def __repr__(self) -> str:
        return f"Unbatched({self.collate_fn!r})"


def check_not_empty(
    dataset: Any,
    batch_size: int | None,
    drop_last: bool,
    sampler: Any,
    batch_sampler: Any,
    streams: bool,
    topology: tuple[int, int],
    split: bool,
) -> None:
    """With ``drop_last`` and torch_drt's own ``split`` by rank, the loader's order over ``topology`` (rank, world
    size) has at least one batch (without it, as in torch, a loader with fewer items than a batch has no batch)."""
    from torch_drt.sampling.partition import Partition

    if not split or not drop_last or sampler is not None or batch_sampler is not None or streams:
        return
    rank, world_size = topology
    if Partition(len(dataset), batch_size or 1, world_size, rank, drop_last).num_batches() == 0:
        raise ValueError(
            f"the dataset has {len(dataset)} samples, fewer than one global batch "
            f"({batch_size=} x {world_size=}) and drop_last=True leaves nothing"
        )
