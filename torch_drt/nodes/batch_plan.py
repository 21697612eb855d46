"""BatchPlanner: the source node of a loader, yielding which dataset indices form each of this rank's batches."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from torchdata.nodes import BaseNode

from torch_drt.sampling.partition import Partition
from torch_drt.sampling.samplers import PositionSampler

__all__ = ["BatchPlan", "BatchPlanner"]


class BatchPlan(NamedTuple):
    """One batch to load.

    Attributes:
        epoch: the epoch it belongs to.
        offset: the global offset of its global batch.
        indices: the dataset indices of this rank's items (may be empty on a padded last batch).
    """

    epoch: int
    offset: int
    indices: list[int]


class BatchPlanner(BaseNode[BatchPlan]):
    """Walks one epoch from a global offset, one global batch per ``next()``.

    Its state is ``{epoch, observation_offset}``: the global offset of the next global batch. Because batch
    ``b`` is computed from the offset alone, a state saved with one batch size, world size or worker count
    resumes under any other.

    Args:
        source: maps positions of the epoch to dataset indices.
        partition: this rank's batch arithmetic (``partition.n`` positions per epoch).
        epoch: the epoch to walk when reset without a state.
    """

    EPOCH_KEY = "epoch"
    OFFSET_KEY = "observation_offset"
    _CHUNK = 64  # batches planned per numpy pass

    def __init__(self, source: PositionSampler, partition: Partition, epoch: int = 0) -> None:
        super().__init__()
        self.source = source
        self.partition = partition
        self._start_epoch = epoch
        self.epoch = epoch
        self.offset = 0
        self._chunk = []
        self._chunk_pos = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self.epoch = int(initial_state[self.EPOCH_KEY])
            self.offset = int(initial_state[self.OFFSET_KEY])
        else:
            self.epoch, self.offset = self._start_epoch, 0
        self.source.start_epoch(self.epoch)
        self._chunk: list[list[int]] = []
        self._chunk_pos = 0

    def remaining(self) -> int:
        """Batches left in this epoch from the current offset."""
        return self.partition.num_batches(self.offset)

    def _plan_chunk(self) -> None:
        """Compute the index lists of the next batches at once (one numpy pass, one ``tolist``)."""
        part = self.partition
        count = min(part.num_batches(self.offset), self._CHUNK)
        g = part.global_batch_size
        starts = self.offset + g * np.arange(count, dtype=np.int64)
        positions = starts[:, None] + part.rank + part.world_size * np.arange(part.batch_size, dtype=np.int64)
        valid = positions < part.n
        flat = self.source.indices(self.epoch, positions[valid])
        if valid.all():
            self._chunk = flat.reshape(count, part.batch_size).tolist()
        else:
            ends = np.cumsum(valid.sum(axis=1))
            values = flat.tolist()
            self._chunk = [values[a:b] for a, b in zip([0, *ends[:-1].tolist()], ends.tolist())]
        self._chunk_pos = 0

    def next(self) -> BatchPlan:
        if self._chunk_pos >= len(self._chunk):  # chunks are dropped by reset(), so they always follow on
            if self.offset >= self.partition.end_offset:
                raise StopIteration
            self._plan_chunk()
        plan = BatchPlan(self.epoch, self.offset, self._chunk[self._chunk_pos])
        self._chunk_pos += 1
        self.offset += self.partition.global_batch_size
        return plan

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self.epoch, self.OFFSET_KEY: self.offset}
