"""Rank arithmetic of streams, in one place: striding, shares and consumer numbering.

Item k of a strided stream belongs to rank ``k % world_size`` (the cache sampler, the weighted mixer), so the ranks'
items are disjoint and together are the whole stream. Where ranks take contiguous blocks instead (the cache loader's
passes), rank ``r`` of ranks taking ``n`` items each starts at ``r * n`` of ``world_total(n)``.
"""

from __future__ import annotations

import numpy as np


def stride_positions(start: int, count: int, *, rank: int, world_size: int) -> np.ndarray:
    """The stream positions of this rank's items ``start .. start+count-1`` (int64)."""
    return (start + np.arange(count, dtype=np.int64)) * world_size + rank


def stride_position(k: int, *, rank: int, world_size: int) -> int:
    """The stream position of this rank's item ``k``."""
    return k * world_size + rank


def stride_range(start: int, count: int, *, rank: int, world_size: int) -> range:
    """``stride_positions`` as a range."""
    return range(start * world_size + rank, (start + count) * world_size + rank, world_size)


def stride_index(position: int, *, rank: int, world_size: int) -> int:
    """The item number of ``rank``'s stream position ``position`` (the inverse of ``stride_positions``)."""
    return (position - rank) // world_size


def owns(k: int, *, rank: int, world_size: int) -> bool:
    """Whether item ``k`` of a stream belongs to ``rank``."""
    return k % world_size == rank


def rank_share(count: int, *, world_size: int, multiple: int = 1, drop_last: bool = False) -> int:
    """Items per rank when ``count`` items are shared by ``world_size`` ranks: the largest share, or with
    ``drop_last`` the equal share in whole ``multiple``s (what is left over is dropped)."""
    if drop_last:
        return count // (world_size * multiple) * multiple
    return -(-count // world_size)


def world_total(per_rank: int, *, world_size: int) -> int:
    """Items over all ranks when each of ``world_size`` ranks takes ``per_rank``."""
    return per_rank * world_size


def rank_offset(rank: int, *, per_rank: int) -> int:
    """Where ``rank``'s contiguous block starts when every rank takes ``per_rank`` items."""
    return rank * per_rank


def consumer_number(rank: int, index: int, *, per_rank: int) -> int:
    """Consumer ``index`` of ``rank``'s ``per_rank`` consumers, numbered among all ranks' consumers."""
    return rank * per_rank + index
