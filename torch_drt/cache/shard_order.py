"""The locality-aware order of a cache's rows: ``ShardWindowShuffle`` over the shards the rows live in.

``ReaderConfig(shard_window=W)`` (and ``to_torch_dataloader(shard_window=W)``) read the active table in this order
instead of weighted draws: every row once per epoch, ``W`` shards at a time (see
``torch_drt.sampling.locality``). It is built from the rows' shards, which the index gives without reading a
payload.
"""

from __future__ import annotations

import numpy as np

from torch_drt.cache.reader import CacheReader
from torch_drt.sampling.locality import ShardWindowShuffle

__all__ = ["ShardWindowOrder", "check_equal_weights", "shard_window_order"]


class ShardWindowOrder:
    """A shard-window shuffle read as a stream: ``draws(start, count)`` like ``WeightedDraws``.

    Several consumers (ranks x loading workers) share one order by blocks: a consumer taking ``budget`` samples
    per pass reads the positions ``[offset, offset + budget)`` of each even pass of ``total`` positions and the
    mirrored block ``[total - offset - budget, total - offset)`` of each odd pass, so the consumers of a job cover
    every row once per epoch when ``total`` is the table's size, each reads its own few shards (a node downloads
    only what its own ranks read), and, as odd epochs walk the shard sequence backward, each consumer starts an
    epoch on the shards it read last: they are still in its node's cache. Every other consumer (``backward``)
    reads its block from its end, so that two neighbours read the window their blocks share at the same time
    (both at the start of a pass or both at its end): a node downloads it once, not twice.

    Args:
        shuffle: the order.
        budget: samples this consumer takes per pass (None: the whole stream is this consumer's).
        offset: where its block starts in each pass.
        total: positions per pass over all consumers.
        backward: read the block from its end (the odd-numbered consumers of a job).
    """

    def __init__(
        self,
        shuffle: ShardWindowShuffle,
        budget: int | None = None,
        offset: int = 0,
        total: int = 0,
        backward: bool = False,
    ) -> None:
        if budget is not None and (budget < 1 or not 0 <= offset <= total - budget):
            raise ValueError(f"{budget=} must be > 0 with 0 <= {offset=} <= {total=} - budget")
        self.shuffle, self.budget, self.offset, self.total = shuffle, budget, offset, total
        self.backward = backward

    def __len__(self) -> int:
        return len(self.shuffle)

    def draws(self, start: int, count: int) -> np.ndarray:
        """Rows at this consumer's stream positions ``start .. start+count-1``."""
        if self.budget is None:
            return self.shuffle.draws(start, count)
        k = np.arange(start, start + count, dtype=np.int64)
        passes, within = np.divmod(k, self.budget)
        if self.backward:
            within = self.budget - 1 - within
        block = np.where(passes % 2 == 1, self.total - self.offset - self.budget, self.offset)
        return self.shuffle.at(passes * self.total + block + within)


def check_equal_weights(weights: np.ndarray | None) -> None:
    """Refuse rows of unequal weights: the shard-window order takes every row once per epoch.

    Raises:
        ValueError: when the weights differ.
    """
    if weights is not None and len(weights) and not np.all(weights == weights[0]):
        raise ValueError(
            "shard_window reads every row once per epoch and cannot follow unequal weights: use the weighted "
            "shuffle (shard_window=None), or repeat rows in the metadata table instead of weighting them"
        )


def shard_window_order(
    reader: CacheReader,
    cache_pos: np.ndarray,
    sample_ids: np.ndarray,
    weights: np.ndarray | None,
    *,
    window: int,
    seed: int,
    block: tuple[int, int, int, bool] | None = None,
) -> ShardWindowOrder:
    """The shard-window order of the rows (``cache_pos[i]``, ``sample_ids[i]``); ``block`` is a consumer's
    (budget, offset, total, backward) in a shared order (see ``ShardWindowOrder``).

    Raises:
        ValueError: when the rows' weights differ (this order takes every row once per epoch; repeat rows in the
            metadata table to weight them).
    """
    check_equal_weights(weights)
    groups = reader.shard_groups(cache_pos, sample_ids)
    return ShardWindowOrder(ShardWindowShuffle(groups, window=window, seed=seed), *(block or (None,)))
