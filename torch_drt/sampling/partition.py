"""Rank arithmetic over the global positions of an epoch: batches, ranks, padding and drop_last.

An epoch is the sequence of global positions 0 .. n-1. Starting from a global ``offset`` (what a checkpoint
stores), global batch b covers positions [offset + b*G, offset + (b+1)*G) with G = batch_size * world_size, and
rank r takes the positions r, r+W, r+2W, ... of it. With ``drop_last`` a global batch that would pass the end
is dropped; without it the last global batch is padded to G so that every rank takes the same number of
steps, and the padding (positions >= n) is removed, so a rank's batch may be short or even empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from torch_drt.sampling.stride import stride_positions, world_total


@dataclass(frozen=True)
class Partition:
    """One rank's view of an epoch of ``n`` positions.

    Args:
        n: positions in the epoch (the dataset or sampler size).
        batch_size: samples per batch on each rank.
        world_size: number of ranks.
        rank: this rank, in [0, world_size).
        drop_last: drop a last global batch that would be incomplete.
    """

    n: int
    batch_size: int
    world_size: int = 1
    rank: int = 0
    drop_last: bool = False

    global_batch_size: int = field(init=False, repr=False)
    """Samples per step over all ranks: ``batch_size * world_size``."""
    end_offset: int = field(init=False, repr=False)
    """The epoch is over once the offset reaches this value."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be > 0")
        if self.world_size < 1:
            raise ValueError(f"world_size={self.world_size} must be > 0")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank} must be in [0, world_size={self.world_size})")
        if self.n < 0:
            raise ValueError(f"n={self.n} must be >= 0")
        g = world_total(self.batch_size, world_size=self.world_size)
        object.__setattr__(self, "global_batch_size", g)
        object.__setattr__(self, "end_offset", self.n - g + 1 if self.drop_last else self.n)

    def num_batches(self, offset: int = 0) -> int:
        """Batches this rank takes from ``offset`` to the end of the epoch."""
        left = max(0, self.n - offset)
        g = self.global_batch_size
        return left // g if self.drop_last else -(-left // g)

    def is_last(self, offset: int) -> bool:
        """Whether the global batch at ``offset`` is the epoch's last."""
        return offset + self.global_batch_size >= self.end_offset

    def positions(self, offset: int, count: int) -> np.ndarray:
        """This rank's positions in ``count`` global batches from ``offset``, one row each (padding included)."""
        starts = offset + self.global_batch_size * np.arange(count, dtype=np.int64)
        return starts[:, None] + stride_positions(0, self.batch_size, rank=self.rank, world_size=self.world_size)

    def items(self) -> int:
        """Items this rank takes per epoch (padding removed)."""
        if self.drop_last:
            return self.num_batches(0) * self.batch_size
        return len(range(self.rank, self.n, self.world_size))

    def rank_positions(self, offset: int) -> range:
        """This rank's positions in the global batch at ``offset``, padding removed."""
        return self.rank_positions_of(range(offset, offset + 1))[0]

    def rank_positions_of(self, offsets: range) -> list[range]:
        """``rank_positions`` of each global batch at ``offsets``, in one pass (a loader plans batches in chunks)."""
        rank, n, size, step = self.rank, self.n, self.global_batch_size, self.world_size
        if not offsets or max(offsets[0], offsets[-1]) + size <= n:  # none reaches the end: no clipping per batch
            return [range(o + rank, o + size, step) for o in offsets]
        return [range(o + rank, min(n, o + size), step) for o in offsets]
