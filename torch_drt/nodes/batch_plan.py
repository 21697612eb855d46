"""BatchPlanner: the source node of a loader, yielding which dataset indices form each of this rank's batches."""

from __future__ import annotations

from typing import Any, NamedTuple

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

    def __init__(self, source: PositionSampler, partition: Partition, epoch: int = 0) -> None:
        super().__init__()
        self.source = source
        self.partition = partition
        self._start_epoch = epoch
        self.epoch = epoch
        self.offset = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self.epoch = int(initial_state[self.EPOCH_KEY])
            self.offset = int(initial_state[self.OFFSET_KEY])
        else:
            self.epoch, self.offset = self._start_epoch, 0
        self.source.start_epoch(self.epoch)

    def remaining(self) -> int:
        """Batches left in this epoch from the current offset."""
        return self.partition.num_batches(self.offset)

    def next(self) -> BatchPlan:
        if self.partition.num_batches(self.offset) == 0:
            raise StopIteration
        positions = self.partition.positions(self.offset)
        plan = BatchPlan(self.epoch, self.offset, self.source.indices(self.epoch, positions).tolist())
        self.offset += self.partition.global_batch_size
        return plan

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self.epoch, self.OFFSET_KEY: self.offset}
