"""LoaderIterator: one epoch of a pipeline loader, delivered in order."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from torch_drt.loader.device import move_to_device

if TYPE_CHECKING:
    from torch_drt.loader.base import PipelineLoader

__all__ = ["Fetched", "LoaderIterator"]


class Fetched(NamedTuple):
    """What the fetch stage returns for one batch.

    Attributes:
        batch: the collated batch.
        indices: what ``return_indices`` yields with it.
        last: whether it is its epoch's last batch.
    """

    batch: Any
    indices: Any
    last: bool


class LoaderIterator:
    """Yields this rank's batches of one epoch, in order; reports the end of the epoch to the loader's position.

    Only one thread may advance it at a time (a second gets ``RuntimeError``); a newer ``iter(loader)`` or
    ``load_state_dict()`` supersedes it. An exception from the dataset, transform, collate or a worker (a time-out,
    a dead process) propagates with its own type and the failed batch counts as delivered: the next ``next()``
    continues with the following batch. A ``KeyboardInterrupt`` counts nothing: the same batch comes next.
    """

    def __init__(self, loader: PipelineLoader, generation: int) -> None:
        self._loader = loader
        self._generation = generation
        self._lock = threading.Lock()
        self._done = False
        self._next = loader._mode.next_fn()  # reset by iter(loader): no BaseNode.__next__ check
        self._device, self._with_indices = loader._device, loader.return_indices
        self._in_order = loader.in_order  # out of order, the batch marked last may come before others

    def __iter__(self) -> LoaderIterator:
        return self

    def __len__(self) -> int:
        """Batches left in this epoch on this rank (after a resume too)."""
        if self._done or self._stale():
            return 0
        return self._loader._mode.remaining(self._loader._position.cursor())

    def _stale(self) -> bool:
        return self._generation != self._loader._generation

    def __next__(self) -> Any:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("another thread is advancing this loader iterator; use one thread per iterator")
        try:
            if self._done:
                raise StopIteration
            if self._generation != self._loader._generation:
                raise RuntimeError("this iterator was superseded by a newer iter(loader) or load_state_dict()")
            try:
                batch, indices, last = self._next()
            except StopIteration:
                self._finish()
                raise
            if last and self._in_order:  # roll over now, so a checkpoint taken after this batch starts the next epoch
                self._finish()
            if self._device is not None:
                batch = move_to_device(batch, self._device)
            return (batch, indices) if self._with_indices else batch
        finally:
            self._lock.release()

    def _finish(self) -> None:
        self._done = True
        self._loader._position.finish_epoch()
        self._loader._end_epoch()

    def close(self) -> None:
        """End this iterator; batches in flight are discarded and the loader keeps the delivered position."""
        if not self._done and not self._stale():
            self._loader._position.stop()
        self._done = True
