"""BatchPlanner: the source node of a map-style loader, yielding which dataset indices form this rank's batches."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from torchdata.nodes import BaseNode

from torch_drt.describe import described
from torch_drt.sampling.partition import Partition
from torch_drt.sampling.samplers import PositionSampler

_UNBOUNDED = 1 << 62  # the epoch length of a user sampler that has not ended yet
_READ_AHEAD = 8  # batches whose indices ``plan_reads`` is told before each batch


class BatchPlan(NamedTuple):
    """One batch to load.

    Attributes:
        epoch: the epoch it belongs to.
        offset: the global offset of its global batch.
        indices: the dataset indices of this rank's items (may be empty on a padded last batch).
        positions: the items' global positions in the epoch.
        last: whether it is the epoch's last batch (False when that is not known yet).
    """

    epoch: int
    offset: int
    indices: list[int]
    positions: range
    last: bool


class BatchPlanner(BaseNode[BatchPlan]):
    """Walks one epoch from a global offset, one global batch per ``next()``.

    Its state is ``{epoch, observation_offset}``: the global offset of the next global batch. Because batch
    ``b`` is computed from the offset alone, a state saved with one batch size, world size or worker count
    resumes under any other. A state may also list ``ahead``: offsets of later global batches already delivered
    (a loader with ``in_order=False``), which are skipped.

    Args:
        source: maps positions of the epoch to dataset indices (``source.n`` positions, maybe unknown yet).
        batch_size: samples per batch on this rank.
        world_size: number of ranks.
        rank: this rank.
        drop_last: drop an incomplete last global batch.
        plan_reads: ``plan_reads(indices, first)``, told before each batch is handed out the indices of this rank's
            next batches (that one and up to 7 more), in order; ``first``: after a reset, the number of them the
            first batch reads, else 0 (a dataset's ``plan_reads``: its shards fetched ahead in the loader's order).
    """

    EPOCH_KEY = "epoch"
    OFFSET_KEY = "observation_offset"
    AHEAD_KEY = "ahead"
    _CHUNK = 64  # batches planned per numpy pass

    def __init__(
        self,
        source: PositionSampler,
        batch_size: int,
        world_size: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        plan_reads: Callable[[list[int], int], None] | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.plan_reads = plan_reads
        self._planned_first = False  # whether plan_reads was told the first batch since the reset
        self.partition = Partition(
            _UNBOUNDED if source.n is None else source.n, batch_size, world_size, rank, drop_last
        )
        self.epoch = 0
        self.offset = 0
        self._chunk: list[BatchPlan] = []
        self._chunk_pos = 0
        self._skip: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        part = self.partition
        return described(self, type(self.source).__name__, batch_size=part.batch_size, world_size=part.world_size,
                         rank=part.rank, drop_last=part.drop_last)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.epoch = int(state.get(self.EPOCH_KEY, 0))
        self.offset = int(state.get(self.OFFSET_KEY, 0))
        self._skip = frozenset(state.get(self.AHEAD_KEY, ()))
        self.source.start_epoch(self.epoch, self.offset)
        self._sync_length()
        self._chunk, self._chunk_pos = [], 0
        self._planned_first = False

    def _sync_length(self) -> None:
        n = _UNBOUNDED if self.source.n is None else self.source.n
        if n != self.partition.n:
            self.partition = dataclasses.replace(self.partition, n=n)

    def _plan_chunk(self) -> None:
        """Compute the index lists of the next batches at once (one numpy pass, one ``tolist``)."""
        part = self.partition
        count = min(part.num_batches(self.offset), self._CHUNK)
        self.source.available(self.offset + count * part.global_batch_size)  # a user sampler is read this far
        self._sync_length()
        part = self.partition
        count = min(part.num_batches(self.offset), self._CHUNK)
        positions = part.positions(self.offset, count)
        if not count or positions[-1, -1] < part.n:  # rows ascend: none is padding (the common case, no mask)
            lists = self.source.indices(self.epoch, positions.reshape(-1)).reshape(count, part.batch_size).tolist()
        else:
            valid = positions < part.n
            values = self.source.indices(self.epoch, positions[valid]).tolist()
            ends = valid.sum(axis=1).cumsum().tolist()
            lists = [values[a:b] for a, b in zip([0, *ends[:-1]], ends)]
        offsets = range(self.offset, self.offset + count * part.global_batch_size, part.global_batch_size)
        epoch, new = self.epoch, tuple.__new__  # plans built here, a chunk at a time: next() only hands them out
        self._chunk = [
            new(BatchPlan, (epoch, o, idx, ranks, False))
            for o, idx, ranks in zip(offsets, lists, part.rank_positions_of(offsets))
        ]
        if self._chunk and part.is_last(offsets[-1]):  # the offsets are the epoch's: only the newest can be its last
            self._chunk[-1] = self._chunk[-1]._replace(last=True)
        self._chunk_pos = 0

    def next(self) -> BatchPlan:
        pos = self._chunk_pos
        if pos >= len(self._chunk):  # chunks are dropped by reset(), so they always follow on
            if self.offset >= self.partition.end_offset:
                raise StopIteration
            self._plan_chunk()
            if not self._chunk:
                raise StopIteration
            pos = 0
        self._chunk_pos = pos + 1
        self.offset += self.partition.global_batch_size
        plan = self._chunk[pos]
        if self._skip and plan.offset in self._skip:
            return self.next()
        if self.plan_reads is not None:
            skip = self._skip
            view = [p.indices for p in self._chunk[pos : pos + _READ_AHEAD] if not skip or p.offset not in skip]
            first = 0 if self._planned_first else len(plan.indices)
            self.plan_reads(list(itertools.chain.from_iterable(view)), first)
            self._planned_first = True
        return plan

    def get_state(self) -> dict[str, Any]:
        state = {self.EPOCH_KEY: self.epoch, self.OFFSET_KEY: self.offset}
        if self._skip:
            skip = sorted(o for o in self._skip if o >= self.offset)
            return state | {self.AHEAD_KEY: skip} if skip else state
        return state

    def state_before(self, plan: BatchPlan, ahead: Sequence[BatchPlan] = ()) -> dict[str, Any]:
        """The state whose next batch is ``plan`` (what a loader keeps when that batch was interrupted), skipping
        the later batches ``ahead`` (delivered out of order)."""
        state = {self.EPOCH_KEY: plan.epoch, self.OFFSET_KEY: plan.offset}
        skip = sorted({p.offset for p in ahead} | {o for o in self._skip if o > plan.offset})
        return state | {self.AHEAD_KEY: skip} if skip else state
