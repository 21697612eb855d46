"""ShardWindowShuffle: an exact shuffle that reads a few shards at a time (for caches streamed from object storage).

A plain shuffle touches every shard in every batch, so a node cache smaller than the dataset thrashes. Here the
rows are grouped by shard and the groups are laid out in one random sequence (fixed by the seed); an epoch walks
that sequence in windows of ``window`` consecutive shards, and the rows of a window come in a fresh random order
(a keyed permutation per epoch and window). Even epochs walk the sequence forward, odd ones backward, and each
epoch cuts its windows at its own random offset, so:

* every row comes exactly once per epoch (an exact permutation), position ``p`` of epoch ``e`` computed directly
  from ``(seed, e, p)``: a resume costs O(1) beyond one O(shards) table per epoch;
* at most ``window`` shards are open at once, and the shards an epoch reads last are the ones the next epoch reads
  first: with a node cache holding half the dataset (plus a window), the second epoch of a dataset twice the
  cache downloads about half of it instead of all of it;
* the price is randomness: a row only ever shares batches with rows of the ``2 * window - 1`` shards around it in
  the sequence, and the order of shards only alternates between the sequence and its reverse. Raise ``window``
  (or write smaller shards) for more mixing; ``window >= shards`` is a plain full shuffle.
"""

from __future__ import annotations

import numpy as np

from torch_drt._distinct import distinct
from torch_drt.sampling._counter import derive_key
from torch_drt.sampling._epoch_stream import EpochStream
from torch_drt.sampling.permutation import KeyedPermutation

_OFFSET, _WINDOW = 1, 2  # stream labels of derive_key


class _Epoch:
    """One epoch's windows: the shard sequence in its direction and the row offsets where windows start."""

    def __init__(self, shuffle: ShardWindowShuffle, epoch: int) -> None:
        seq = shuffle.sequence if epoch % 2 == 0 else shuffle.sequence[::-1]
        g, w = len(seq), shuffle.window
        shift = derive_key(shuffle.seed, _OFFSET, epoch) % w if g > w else 0
        cuts = distinct(np.concatenate([[0], np.arange(w - shift, g, w), [g]])).astype(np.int64)
        self.sequence = seq
        self.rows_before = np.concatenate([[0], np.cumsum(shuffle.counts[seq])]).astype(np.int64)
        self.window_start = self.rows_before[cuts[:-1]]
        self.window_size = self.rows_before[cuts[1:]] - self.window_start
        self.perms: dict[int, KeyedPermutation] = {}


class ShardWindowShuffle(EpochStream[_Epoch]):
    """Row ``indices(epoch, positions)`` of an exact, shard-local shuffle (see the module docstring).

    Args:
        groups: the shard of each row (any integers; rows of one shard share a value), e.g.
            ``CacheReader.shard_groups``.
        window: shards mixed at a time (>= 1).
        seed: the shuffle seed.
    """

    def __init__(self, groups: np.ndarray, *, window: int, seed: int) -> None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.size == 0:
            raise ValueError(f"groups must be a non-empty 1-D array, got shape {groups.shape}")
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"{window=} must be an int >= 1")
        super().__init__()
        self.n, self.window, self.seed = len(groups), window, seed
        if np.all(groups[1:] >= groups[:-1]):  # rows already grouped in shard order (a cache's own table): no sort
            self._rows: np.ndarray | None = None
            ordered = groups
        else:
            self._rows = np.argsort(groups, kind="stable")
            ordered = groups[self._rows]
        starts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        self._first = np.concatenate([[0], starts]).astype(np.int64)
        self.counts = np.diff(np.concatenate([self._first, [self.n]])).astype(np.int64)
        self.sequence = KeyedPermutation(len(self.counts), seed, 0)(np.arange(len(self.counts), dtype=np.int64))

    def _plan(self, epoch: int) -> _Epoch:
        return _Epoch(self, epoch)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (each in ``[0, n)``) of ``epoch``."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        plan = self._epoch(epoch)
        win = np.searchsorted(plan.window_start, positions, side="right") - 1
        local = positions - plan.window_start[win]
        for w in distinct(win).tolist():
            perm = plan.perms.get(w)
            if perm is None:
                perm = plan.perms[w] = KeyedPermutation(
                    int(plan.window_size[w]), derive_key(self.seed, _WINDOW, w), epoch
                )
            sel = win == w
            local[sel] = perm(local[sel])
        offset = plan.window_start[win] + local  # rows counted along the epoch's shard sequence
        at = np.searchsorted(plan.rows_before, offset, side="right") - 1
        group = plan.sequence[at]
        rows = self._first[group] + offset - plan.rows_before[at]
        return rows if self._rows is None else self._rows[rows]
