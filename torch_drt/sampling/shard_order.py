"""The exact orders of a table's rows, read as streams: every row once per epoch.

``shuffle=True`` reads the active table as ``EpochPermutations`` (a keyed permutation per epoch), or with
``ReaderConfig(shard_window=W)`` (and ``to_torch_dataloader(shard_window=W)``) in the locality-aware order,
``ShardWindowShuffle`` over the shards the rows live in, ``W`` shards at a time (see
``torch_drt.sampling.locality``; the cache builds it from the rows' shards, which its index gives without
reading a payload: ``torch_drt.cache._row_orders``). Draws by weight with replacement (``sampling="weighted"``)
are ``torch_drt.sampling.weighted``'s.
"""

from __future__ import annotations

import numpy as np

from torch_drt.sampling._epoch_stream import EpochStream
from torch_drt.sampling.locality import ShardWindowShuffle
from torch_drt.sampling.permutation import KeyedPermutation


class EpochPermutations(EpochStream[KeyedPermutation]):
    """Every row once per epoch: stream position ``P`` is position ``P % n`` of epoch ``P // n``'s keyed permutation.

    ``draws(start, count)`` and ``at(stream)`` read it like ``WeightedDraws`` and ``ShardWindowShuffle``
    (``EpochStream``); each position is computed directly from ``(seed, epoch, position)`` (O(1) memory beyond the
    permutations of the epochs in use: ``torch_drt.sampling.permutation.KeyedPermutation``, the order
    ``torch_drt.StatefulDataLoader`` shuffles with).

    Args:
        n: rows (>= 1).
        seed: the shuffle seed.
    """

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError(f"{n=} must be >= 1")
        super().__init__()
        self.n, self.seed = n, seed

    def _plan(self, epoch: int) -> KeyedPermutation:
        return KeyedPermutation(self.n, self.seed, epoch)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (each in ``[0, n)``) of ``epoch``."""
        return self._epoch(epoch)(positions)


class ShardWindowOrder:
    """An exact order (a shard-window shuffle, or ``EpochPermutations``) read as a stream: ``draws(start, count)``
    like ``WeightedDraws``.

    Several consumers (ranks x loading workers) share one order by blocks: a consumer taking ``budget`` samples
    per pass reads the positions ``[offset, offset + budget)`` of each even pass of ``total`` positions and the
    mirrored block ``[total - offset - budget, total - offset)`` of each odd pass, so the consumers of a job cover
    every row once per epoch when ``total`` is the table's size, each reads its own few shards (a node downloads
    only what its own ranks read), and, as odd epochs walk the shard sequence backward, each consumer starts an
    epoch on the shards it read last: they are still in its node's cache. Every other consumer (``backward``)
    reads its block from its end, so that two neighbours read the window their blocks share at the same time
    (both at the start of a pass or both at its end): a node downloads it once, not twice. A plain permutation has
    no locality to keep: its consumers read their blocks forward, unmirrored (``mirror=False``).

    Args:
        shuffle: the order.
        budget: samples this consumer takes per pass (None: the whole stream is this consumer's).
        offset: where its block starts in each pass.
        total: positions per pass over all consumers.
        backward: read the block from its end (the odd-numbered consumers of a job).
        mirror: take the mirrored block in odd passes.
    """

    def __init__(
        self,
        shuffle: ShardWindowShuffle | EpochPermutations,
        budget: int | None = None,
        offset: int = 0,
        total: int = 0,
        backward: bool = False,
        mirror: bool = True,
    ) -> None:
        if budget is not None and (budget < 1 or not 0 <= offset <= total - budget):
            raise ValueError(f"{budget=} must be > 0 with 0 <= {offset=} <= {total=} - budget")
        self.shuffle, self.budget, self.offset, self.total = shuffle, budget, offset, total
        self.backward, self.mirror = backward, mirror

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
        mirrored = passes % 2 == 1 if self.mirror else np.zeros(len(passes), dtype=bool)
        block = np.where(mirrored, self.total - self.offset - self.budget, self.offset)
        return self.shuffle.at(passes * self.total + block + within)


def check_equal_weights(weights: np.ndarray | None, order: str = "shard_window") -> None:
    """Refuse rows of unequal weights: an exact order (``order``: what reads it) takes every row once per epoch.

    Raises:
        ValueError: when the weights differ, naming two rows that differ.
    """
    if weights is None or not len(weights):
        return
    unequal = np.flatnonzero(weights != weights[0])
    if unequal.size:
        row = int(unequal[0])
        raise ValueError(
            f"{order} reads every row once per epoch and cannot follow unequal weights (row 0 has weight "
            f"{float(weights[0])!r}, row {row} has {float(weights[row])!r}): pass sampling='weighted' for draws by "
            "weight with replacement, or repeat rows in the metadata table instead of weighting them"
        )

