"""Rank striding of a stream: item k of a stream belongs to rank ``k % world_size``.

The cache sampler and the weighted mixer shard their streams this way, so the ranks' items are disjoint and
together are the whole stream.
"""

from __future__ import annotations

import numpy as np

__all__ = ["owns", "rank_share", "stride_positions"]


def stride_positions(start: int, count: int, *, rank: int, world_size: int) -> np.ndarray:
    """The stream positions of this rank's items ``start .. start+count-1`` (int64)."""
    return (start + np.arange(count, dtype=np.int64)) * world_size + rank


def owns(k: int, *, rank: int, world_size: int) -> bool:
    """Whether item ``k`` of a stream belongs to ``rank``."""
    return k % world_size == rank


def rank_share(count: int, *, world_size: int) -> int:
    """Items per rank when ``count`` items are strided over ``world_size`` ranks (the largest share)."""
    return -(-count // world_size)
