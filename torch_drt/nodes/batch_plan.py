"""BatchPlanner: the source node of a map-style loader, yielding which dataset indices form this rank's batches."""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from operator import length_hint
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
        self._chunk: list[BatchPlan] = []
        self._plans: Iterator[BatchPlan] = iter(self._chunk)  # the chunk's batches not handed out yet
        self._chunk_end = 0  # the offset after the chunk's last batch
        self._later: list[BatchPlan] = []  # the chunk's batches after a cut (``planned(limit)``): next in line
        self._skip: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        part = self.partition
        return described(self, type(self.source).__name__, batch_size=part.batch_size, world_size=part.world_size,
                         rank=part.rank, drop_last=part.drop_last)

    @property
    def offset(self) -> int:
        """The global offset of the next global batch (the batches handed out are counted by the chunk's iterator,
        in C, so taking a batch costs no bookkeeping in Python)."""
        return self._chunk_end - length_hint(self._plans) * self.partition.global_batch_size

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.epoch = int(state.get(self.EPOCH_KEY, 0))
        offset = int(state.get(self.OFFSET_KEY, 0))
        self._skip = frozenset(state.get(self.AHEAD_KEY, ()))
        self.source.start_epoch(self.epoch, offset)
        self._sync_length()
        deque(self._plans, maxlen=0)  # a loop over ``planned()`` ends here
        self._chunk, self._chunk_end, self._later = [], offset, []
        self._plans = iter(self._chunk)
        self._planned_first = False

    def _sync_length(self) -> None:
        n = _UNBOUNDED if self.source.n is None else self.source.n
        if n != self.partition.n:
            self.partition = dataclasses.replace(self.partition, n=n)

    def _plan_chunk(self) -> None:
        """Plan the next batches at once: their offsets, positions and index lists (the sampler's ``index_lists``,
        else one numpy pass)."""
        offset = self._chunk_end  # (called once the chunk before is handed out)
        sized = self.source.n is not None
        for _ in range(2 if sized else 1):  # again where a sampler is longer than its length (then read unsized)
            part = self.partition
            count = min(part.num_batches(offset), self._CHUNK)
            self.source.available(offset + count * part.global_batch_size)  # a user sampler is read this far
            self._sync_length()
            if self.source.n is not None:
                break
        part = self.partition
        count = min(part.num_batches(offset), self._CHUNK)
        size = part.global_batch_size
        offsets = range(offset, offset + count * size, size)
        ranks = part.rank_positions_of(offsets)
        lists = self.source.index_lists(self.epoch, ranks)
        if lists is None:
            lists = self._index_lists(offset, count)
        # the plans, built a chunk at a time and in C (a NamedTuple's own __new__ is a Python call)
        fields = zip(itertools.repeat(self.epoch), offsets, lists, ranks, itertools.repeat(False))
        self._chunk = list(map(tuple.__new__, itertools.repeat(BatchPlan), fields))
        if self._chunk and part.is_last(offsets[-1]):  # the offsets are the epoch's: only the newest can be its last
            self._chunk[-1] = self._chunk[-1]._replace(last=True)
        self._chunk_end = offsets.stop
        self._plans = iter(self._chunk)

    def _index_lists(self, offset: int, count: int) -> list[list[int]]:
        """The index lists of ``count`` batches from ``offset`` through the sampler's ``indices`` (one numpy pass)."""
        part = self.partition
        positions = part.positions(offset, count)
        if not count or positions[-1, -1] < part.n:  # rows ascend: none is padding (the common case, no mask)
            return self.source.indices(self.epoch, positions.reshape(-1)).reshape(count, part.batch_size).tolist()
        valid = positions < part.n
        values = self.source.indices(self.epoch, positions[valid]).tolist()
        ends = valid.sum(axis=1).cumsum().tolist()
        return [values[a:b] for a, b in zip([0, *ends[:-1]], ends)]

    def planned(self, limit: int | None = None) -> Iterator[BatchPlan] | None:
        """The batches planned and not handed out yet, for a caller that takes them in a loop: taking one is a
        ``next()`` (the state moves past it). The iterator ends with the planned chunk, after ``limit`` batches (the
        chunk is cut there: ``next()`` goes on with the rest; a loader's statistics countdown), or at a ``reset()``;
        its ``length_hint`` is its batches left. None when ``next()`` has work to do per batch (``plan_reads``,
        batches to skip), none is planned yet or ``limit`` is 0: call ``next()`` then."""
        if self._skip or self.plan_reads is not None or not (planned := length_hint(self._plans)):
            return None
        if limit is None or limit >= planned:
            return self._plans
        if limit <= 0:
            return None
        plans = list(self._plans)
        self._plans, self._later = iter(plans[:limit]), plans[limit:] + self._later
        self._chunk_end -= (planned - limit) * self.partition.global_batch_size
        return self._plans

    def next(self) -> BatchPlan:
        plan = next(self._plans, None)
        if plan is None and self._later:  # the rest of a cut chunk
            self._plans, self._later = iter(self._later), []
            self._chunk_end += length_hint(self._plans) * self.partition.global_batch_size
            plan = next(self._plans)
        if plan is None:  # chunks are dropped by reset(), so they always follow on
            if self.offset >= self.partition.end_offset:
                raise StopIteration
            self._plan_chunk()
            plan = next(self._plans, None)
            if plan is None:
                raise StopIteration
        if self._skip and plan.offset in self._skip:
            return self.next()
        if self.plan_reads is not None:
            pos = len(self._chunk) - length_hint(self._plans) - 1
            skip = self._skip
            view = [p.indices for p in self._chunk[pos : pos + _READ_AHEAD] if not skip or p.offset not in skip]
            first = 0 if self._planned_first else len(plan.indices)
            self.plan_reads(list(itertools.chain.from_iterable(view)), first)
            self._planned_first = True
        return plan

    def get_state(self) -> dict[str, Any]:
        offset = self.offset
        state = {self.EPOCH_KEY: self.epoch, self.OFFSET_KEY: offset}
        if self._skip:
            skip = sorted(o for o in self._skip if o >= offset)
            return state | {self.AHEAD_KEY: skip} if skip else state
        return state

    def state_before(self, plan: BatchPlan, ahead: Sequence[BatchPlan] = ()) -> dict[str, Any]:
        """The state whose next batch is ``plan`` (what a loader keeps when that batch was interrupted), skipping
        the later batches ``ahead`` (delivered out of order)."""
        state = {self.EPOCH_KEY: plan.epoch, self.OFFSET_KEY: plan.offset}
        skip = sorted({p.offset for p in ahead} | {o for o in self._skip if o > plan.offset})
        return state | {self.AHEAD_KEY: skip} if skip else state
