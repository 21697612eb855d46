"""The iterator of one epoch of a StatefulDataLoader."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch_drt.loader._device import move_to_device
from torch_drt.nodes.batch_plan import BatchPlan, BatchPlanner

if TYPE_CHECKING:
    from torch_drt.loader.dataloader import StatefulDataLoader

__all__ = ["LoaderIterator", "LoaderPosition"]


@dataclass(slots=True)
class LoaderPosition:
    """Where the loader's delivered stream stands (kept outside DataLoader's guarded ``__setattr__``)."""

    epoch: int = 0
    offset: int = 0
    active: bool = False


class LoaderIterator:
    """Yields this rank's batches of one epoch, in order, and keeps the loader's delivered position.

    Only one thread may advance it at a time (a second gets ``RuntimeError``); a newer ``iter(loader)``
    supersedes it. An exception from the dataset, transform or collate propagates with its own type, and the
    next ``next()`` continues with the following batch.
    """

    def __init__(self, loader: StatefulDataLoader, generation: int) -> None:
        self._loader = loader
        self._generation = generation
        self._lock = threading.Lock()
        self._done = False

    def __iter__(self) -> LoaderIterator:
        return self

    def __len__(self) -> int:
        """Batches left in this epoch on this rank (after a resume too)."""
        if self._done or self._stale():
            return 0
        return self._loader._remaining()

    def _stale(self) -> bool:
        return self._generation != self._loader._generation

    def _sync(self, plan: BatchPlan | None = None) -> None:
        loader = self._loader
        if plan is not None:  # the delivered batch says where the stream stands: no state dict per batch
            loader._pos.epoch, loader._pos.offset = (
                plan.epoch,
                plan.offset + loader._planner.partition.global_batch_size,
            )
        else:
            state = loader._mapper.state_dict()[loader._mapper.SOURCE_KEY]
            loader._pos.epoch = int(state[BatchPlanner.EPOCH_KEY])
            loader._pos.offset = int(state[BatchPlanner.OFFSET_KEY])
        if (
            loader._pos.offset >= loader._planner.partition.end_offset
        ):  # the epoch is delivered: roll over now, so a checkpoint starts the next
            loader._pos.epoch, loader._pos.offset = loader._pos.epoch + 1, 0
            loader._pos.active = False
            self._done = True

    def __next__(self) -> Any:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("another thread is advancing this loader iterator; use one thread per iterator")
        try:
            if self._done:
                raise StopIteration
            if self._stale():
                raise RuntimeError("this iterator was superseded by a newer iter(loader)")
            loader = self._loader
            try:
                plan, batch = loader._mapper.next()  # reset by iter(loader): no BaseNode.__next__ check
            except StopIteration:
                self._done = True
                loader._pos.epoch, loader._pos.offset, loader._pos.active = loader._pos.epoch + 1, 0, False
                raise
            except KeyboardInterrupt:
                raise  # nothing was delivered: the same batch comes next
            except BaseException:
                self._sync()  # a failed batch counts as delivered: the next next() moves on
                raise
            self._sync(plan)
            if loader._device is not None:
                batch = move_to_device(batch, loader._device)
            return (batch, plan.indices) if loader.return_indices else batch
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop this iterator; batches in flight are discarded."""
        self._done = True
        if not self._stale():
            self._loader._active = False
