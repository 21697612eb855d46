"""BatchSamplerPlanner: the source node of a loader given torch's ``batch_sampler``: its lists are the batches."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torchdata.nodes import BaseNode

from torch_drt.describe import described
from torch_drt.nodes.batch_plan import BatchPlan
from torch_drt.sampling.stride import stride_index, stride_range

_END = object()


class BatchSamplerPlanner(BaseNode[BatchPlan]):
    """Each list of indices a batch sampler yields is one batch of this rank (torch's ``batch_sampler``).

    The batch sampler is read lazily from a new iterator at each epoch, as torch's loader reads it. The state is
    ``{epoch, batches, items}``: batches and items delivered in the epoch; a resume skips ``batches`` lists of
    the new iterator. The j-th item this rank's batch sampler yields has the global position ``j * world_size +
    rank`` (the loader's own striding rule), which keys its random generator.

    Args:
        batch_sampler: an iterable of lists of int indices.
        dataset_len: the dataset's length (indices must be in ``[0, dataset_len)``).
        world_size: number of ranks.
        rank: this rank.
    """

    EPOCH_KEY = "epoch"
    BATCHES_KEY = "batches"
    ITEMS_KEY = "items"
    AHEAD_KEY = "ahead"

    def __init__(self, batch_sampler: Iterable[Any], dataset_len: int, world_size: int = 1, rank: int = 0) -> None:
        super().__init__()
        if not hasattr(batch_sampler, "__iter__"):
            kind = type(batch_sampler).__name__
            raise TypeError(f"batch_sampler must be an iterable of lists of indices, got {kind}")
        self.batch_sampler, self.dataset_len = batch_sampler, dataset_len
        self.world_size, self.rank = world_size, rank
        self.epoch = self.batches = self.items = 0
        self._iterator: Iterator[Any] | None = None
        self._peeked: Any = _END  # a list read past len(batch_sampler), not planned yet
        self._skip: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        return described(self, self.batch_sampler, world_size=self.world_size, rank=self.rank)

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.epoch = int(state.get(self.EPOCH_KEY, 0))
        self.batches = int(state.get(self.BATCHES_KEY, 0))
        self.items = int(state.get(self.ITEMS_KEY, 0))
        self._skip = frozenset(state.get(self.AHEAD_KEY, ()))
        self._iterator, self._peeked = iter(self.batch_sampler), _END
        for _ in itertools.islice(self._iterator, self.batches):
            pass

    def _indices(self, batch: Any) -> list[int]:
        try:
            indices = [operator.index(i) for i in batch if not isinstance(i, bool)]
            valid = len(indices) == len(batch) and all(0 <= i < self.dataset_len for i in indices)
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(
                f"batch {self.batches} of the batch_sampler is {batch!r}: batch samplers must yield lists of ints in "
                f"[0, {self.dataset_len})"
            )
        return indices

    def next(self) -> BatchPlan:
        assert self._iterator is not None
        batch, self._peeked = (next(self._iterator) if self._peeked is _END else self._peeked), _END
        indices = self._indices(batch)
        positions = stride_range(self.items, len(indices), rank=self.rank, world_size=self.world_size)
        number = self.batches
        self.batches += 1
        self.items += len(indices)
        last = hasattr(self.batch_sampler, "__len__") and self.batches >= len(self.batch_sampler)  # type: ignore
        if last:  # read on as torch does, to the end: a RandomSampler inside draws once more from its generator there
            self._peeked = next(self._iterator, _END)  # (and one longer than its length goes on)
            last = self._peeked is _END
        if self._skip and number in self._skip:  # delivered ahead of an older batch before the checkpoint
            return self.next()
        return BatchPlan(self.epoch, number, indices, positions, last)

    def get_state(self) -> dict[str, Any]:
        state = {self.EPOCH_KEY: self.epoch, self.BATCHES_KEY: self.batches, self.ITEMS_KEY: self.items}
        skip = sorted(b for b in self._skip if b >= self.batches) if self._skip else None
        return state | {self.AHEAD_KEY: skip} if skip else state

    def state_before(self, plan: BatchPlan, ahead: Sequence[BatchPlan] = ()) -> dict[str, Any]:
        """The state whose next batch is ``plan``, skipping the later batches ``ahead`` (delivered out of order)."""
        items = stride_index(plan.positions.start, rank=self.rank, world_size=self.world_size)
        state = {self.EPOCH_KEY: plan.epoch, self.BATCHES_KEY: plan.offset, self.ITEMS_KEY: items}
        skip = sorted({p.offset for p in ahead} | {b for b in self._skip if b > plan.offset})
        return state | {self.AHEAD_KEY: skip} if skip else state
