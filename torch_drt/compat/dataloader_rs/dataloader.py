"""dataloader-rs's ``PyDataloader`` on ``torch_drt.StatefulDataLoader``: its arguments, errors and epoch semantics.

What differs from ``torch_drt.StatefulDataLoader`` is only what dataloader-rs does otherwise, and it is done here,
around the loader's public API:

- a batch is the plain list of its samples without ``collate_fn`` (torch_drt's loader keeps torch's collate);
- each ``iter(loader)`` is a new epoch with its own iterator: a second one does not stop the first (two epochs
  at once run on two inner loaders, made on demand and reused after);
- ``len(dataset)`` and the sampler are read at ``iter()`` (the sampler whole, each item checked) and
  ``len(loader)``, never at construction; an epoch of no batch (``drop_last`` with fewer items than a batch)
  yields nothing;
- one rank: the process group, if any, does not shard this loader;
- a one-argument ``transform`` (a torchvision ``Compose``) is called with the item only.

``shuffle=True`` orders epoch e as ``torch_drt.StatefulDataLoader(shuffle=True, seed=seed)`` does (a keyed
permutation of (len(dataset), seed, e)): reproducible with ``seed``, new every epoch.
"""

from __future__ import annotations

import os
import secrets
import threading
import warnings
from collections.abc import Callable, Iterable, Sized
from typing import Any, cast

import numpy as np

from torch_drt.compat.dataloader_rs._arguments import checked_indices, count, flag, read_whole
from torch_drt.compat.dataloader_rs.datasets import check_dataset, is_async
from torch_drt.loader._arguments import check_workers
from torch_drt.sampling.permutation import KeyedPermutation

__all__ = ["PyDataloader", "PyDataloaderIter"]

MAX_RUNTIME_THREADS = 1024


class _EpochIndices:
    """The indices of the epoch an inner loader runs (its sampler), set before each ``iter()`` of it."""

    def __init__(self) -> None:
        self.indices = np.empty(0, dtype=np.int64)

    def __iter__(self) -> Any:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class _ListCollate:
    """dataloader-rs's ``collate_fn(list[sample])``: a batch's items as a list, whatever ``__getitems__`` returned
    (torch_drt's loader hands a sequence on as it is, as torch's does)."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn

    def __call__(self, items: Any) -> Any:
        return self.fn(items if type(items) is list else list(items))

    def __repr__(self) -> str:
        return repr(self.fn)


class _Inner:
    """A ``torch_drt.StatefulDataLoader`` that runs this loader's epochs, one at a time."""

    def __init__(self, owner: PyDataloader, n: int, sequential: bool) -> None:
        from torch_drt.loader import StatefulDataLoader

        self.n, self.sequential, self.pid = n, sequential, os.getpid()
        self.view = _EpochIndices()
        self.loader = StatefulDataLoader(
            owner.dataset,
            batch_size=owner.batch_size,
            sampler=None if sequential else self.view,
            num_workers=owner.num_workers,  # dataloader-rs's workers: threads, made once and reused
            worker_method="thread", persistent_workers=owner.num_workers > 0,
            collate_fn=list if owner.collate_fn is None else _ListCollate(owner.collate_fn),
            drop_last=owner.drop_last,
            item_concurrency=owner.item_concurrency,
            prefetch_depth=owner.prefetch_depth,
            transform=owner.transform,  # called as f(index, item) or f(item): the loader's transform rule
            return_indices=owner.return_indices,
            rank=0,
            world_size=1,
        )


class PyDataloader:
    """Batches of a map-style dataset on worker threads, with dataloader-rs's arguments and semantics.

    Args:
        dataset: a ``PyDataset``, a ``PyAsyncDataset``, a source dataset (``HttpDataset``, ``FileDataset``,
            ``ObjectStoreDataset``) or any object with ``__len__`` and ``__getitem__``.
        batch_size: samples per batch (at least 1).
        prefetch_depth: batches loaded ahead beyond the ``num_workers`` in progress (at least 1).
        shuffle: a new random order every epoch (not with ``sampler``).
        sampler: an iterable of int indices, read whole at each ``iter()``.
        num_workers: batches loaded in parallel on threads (0: in the calling thread).
        collate_fn: ``collate_fn(samples) -> batch``; without it a batch is the list of its samples.
        drop_last: drop an epoch's last batch when it is smaller than ``batch_size``.
        seed: the shuffle seed (only with ``shuffle=True``); None draws one.
        item_concurrency: items of one batch fetched at once, one ``__getitem__`` each (``__getitems__`` is
            used only when it is 1).
        transform: ``transform(index, sample)`` for each item before ``collate_fn`` (or ``transform(sample)``
            when it takes one argument).
        return_indices: yield ``(batch, indices)`` with the dataset indices of the batch's items.
        runtime_threads: accepted for async and source datasets (1 to 1024), where dataloader-rs sizes its
            network runtime with it; torch_drt's network I/O runs on one event loop, so it changes nothing.
        items_in_parallel: dataloader-rs 0.2's name of ``item_concurrency`` (a ``DeprecationWarning``).

    Raises:
        ValueError: ``batch_size``, ``prefetch_depth`` or ``item_concurrency`` below 1, ``num_workers`` outside
            ``[0, 1024]`` (each is a thread; dataloader-rs fails to start them), ``shuffle`` with a
            ``sampler``, a ``seed`` without ``shuffle``, ``runtime_threads`` out of range or with a
            synchronous dataset.
        TypeError: a non-iterable sampler, arguments of the wrong type, or a dataset dataloader-rs refuses.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        prefetch_depth: int = 2,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        seed: int | None = None,
        item_concurrency: int = 1,
        *,
        transform: Callable[..., Any] | None = None,
        return_indices: bool = False,
        runtime_threads: int | None = None,
        items_in_parallel: int | None = None,
    ) -> None:
        check_dataset(dataset)
        if items_in_parallel is not None:
            warnings.warn("items_in_parallel is deprecated: use item_concurrency", DeprecationWarning, stacklevel=2)
            item_concurrency = items_in_parallel
        self.batch_size = count("batch_size", batch_size, 1)
        self.prefetch_depth = count("prefetch_depth", prefetch_depth, 1)
        self.num_workers = check_workers(count("num_workers", num_workers, 0))  # threads: at most MAX_WORKERS
        self.item_concurrency = count("item_concurrency", item_concurrency, 1)
        self.shuffle, self.drop_last = flag("shuffle", shuffle), flag("drop_last", drop_last)
        self.return_indices = flag("return_indices", return_indices)
        if self.shuffle and sampler is not None:
            raise ValueError("sampler and shuffle are mutually exclusive")
        if seed is not None and not self.shuffle:
            raise ValueError("seed only applies when shuffle=True")
        if seed is not None and not 0 <= count("seed", seed, 0) < 1 << 64:
            raise ValueError(f"seed must be < 2**64, got {seed}")
        if sampler is not None and not hasattr(sampler, "__iter__"):
            raise TypeError(f"'{type(sampler).__name__}' object is not iterable: sampler must yield int indices")
        for name, fn in (("collate_fn", collate_fn), ("transform", transform)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if runtime_threads is not None:
            if not is_async(dataset):
                raise ValueError("runtime_threads applies to async and source datasets only, not to a PyDataset")
            if not 1 <= count("runtime_threads", runtime_threads, 1) <= MAX_RUNTIME_THREADS:
                raise ValueError(f"runtime_threads must be in [1, {MAX_RUNTIME_THREADS}], got {runtime_threads}")
        self.dataset, self.sampler, self.collate_fn, self.transform = dataset, sampler, collate_fn, transform
        self.seed = int(seed) if seed is not None else secrets.randbits(63) if self.shuffle else None
        self.runtime_threads = runtime_threads
        self._epoch = 0
        self._idle: list[_Inner] = []
        self._lock = threading.Lock()

    def _batches(self, n: int) -> int:
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __len__(self) -> int:
        """Batches per epoch, from ``len(sampler)`` (``TypeError`` without one) or ``len(dataset)``."""
        if self.sampler is not None:
            if not hasattr(self.sampler, "__len__"):
                raise TypeError(f"object of type '{type(self.sampler).__name__}' has no len(): len(loader) needs it")
            return self._batches(len(cast("Sized", self.sampler)))
        return self._batches(len(self.dataset))

    def _epoch_indices(self, epoch: int, n: int) -> np.ndarray | None:
        """The epoch's indices (None: ``0 .. n-1`` in order)."""
        if self.sampler is not None:
            return checked_indices(read_whole(self.sampler), n)
        if self.shuffle:
            return KeyedPermutation(n, cast(int, self.seed), epoch)(np.arange(n, dtype=np.int64)) if n else np.arange(0)
        return None

    def _take(self, n: int, sequential: bool) -> _Inner:
        with self._lock:
            for inner in self._idle:
                if inner.pid == os.getpid() and inner.n == n and inner.sequential == sequential:
                    self._idle.remove(inner)
                    return inner
            self._idle = [i for i in self._idle if i.pid == os.getpid()]  # a forked child builds its own threads
        return _Inner(self, n, sequential)

    def _give_back(self, inner: _Inner) -> None:
        with self._lock:
            self._idle.append(inner)

    def __iter__(self) -> PyDataloaderIter:
        """Start a new epoch: read ``len(dataset)`` and the sampler now, and return its own iterator."""
        with self._lock:
            epoch, self._epoch = self._epoch, self._epoch + 1
        n = len(self.dataset)
        indices = self._epoch_indices(epoch, n)
        batches = self._batches(n if indices is None else len(indices))
        if batches == 0:
            return PyDataloaderIter(self, None, 0)
        inner = self._take(n, indices is None)
        if indices is not None:
            inner.view.indices = indices
        return PyDataloaderIter(self, inner, batches)

    def close(self) -> None:
        """Stop the idle inner loaders' threads and event loops (``aclose()`` of an async dataset is awaited)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for inner in idle:
            inner.loader.close()

    def __repr__(self) -> str:
        return (
            f"PyDataloader({type(self.dataset).__name__}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"num_workers={self.num_workers}, drop_last={self.drop_last})"
        )


class PyDataloaderIter:
    """One epoch of a ``PyDataloader``; ``len()`` is the number of batches not yet delivered.

    An exception from the dataset, ``transform`` or ``collate_fn`` reaches the caller with its own type and the
    next ``next()`` continues with the following batch. A second thread calling ``next()`` while another is
    advancing it gets ``RuntimeError``, and so does a forked child that continues an epoch with threads (workers,
    ``item_concurrency`` or an async dataset) started before ``fork()``: a new ``iter()`` there works.
    """

    def __init__(self, owner: PyDataloader, inner: _Inner | None, batches: int) -> None:
        self._owner, self._inner, self._left = owner, inner, batches
        self._iterator = iter(inner.loader) if inner is not None else None
        # threads (workers, item fetchers, an async dataset's event loop) do not survive fork()
        self._pid = os.getpid() if owner.num_workers or owner.item_concurrency > 1 or is_async(owner.dataset) else None

    def __iter__(self) -> PyDataloaderIter:
        return self

    def __len__(self) -> int:
        return self._left

    def __next__(self) -> Any:
        if self._iterator is None:
            raise StopIteration
        if self._pid is not None and self._pid != os.getpid():
            raise RuntimeError("this epoch was started before fork(); start a new one in this process (iter())")
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._release()
            raise
        except KeyboardInterrupt:
            raise  # nothing was delivered: the same batch comes next
        except BaseException:
            self._left = max(0, self._left - 1)  # a failed batch counts as delivered
            raise
        self._left -= 1
        if self._owner.return_indices:
            batch, indices = batch
            batch = (batch, [int(i) for i in indices])
        return batch

    def _release(self) -> None:
        inner, self._inner, self._iterator, self._left = self._inner, None, None, 0
        if inner is not None and inner.pid == os.getpid():
            self._owner._give_back(inner)

    def close(self) -> None:
        """End this epoch early; batches in flight are discarded."""
        self._release()

    def __del__(self) -> None:
        self._release()
