"""ReadAhead: the loaders' hook into prefetching: the shards of the next batches, handed over before each read.

A loader whose order is a pure function of its position knows the rows of any future batch. Before reading batch
``k`` it calls ``before(k)``; ``ReadAhead`` computes the rows of the batch that just came into view
(``k + depth - 1``), keeps the shards of the batches in view in read order, and gives them to
``CacheReader.prefetch``. After a start or a resume the view fills a few batches per call (so the first batch
costs little more than itself). For a reader of local caches it does nothing and computes nothing.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable

import numpy as np

from torch_drt._distinct import first_seen
from torch_drt.cache.reader import CacheReader

BatchRows = Callable[[int], "tuple[np.ndarray, np.ndarray] | None"]
ManyBatchRows = Callable[[int, int], "list[tuple[np.ndarray, np.ndarray]]"]
_FILL = 4  # batches computed per call at most: the view fills over the first batches


class ReadAhead:
    """Keeps ``reader``'s prefetch plan ``depth`` batches ahead of the reads.

    Args:
        reader: the reader the batches are read with.
        batch_rows: batch number -> (cache positions, sample ids) of its rows, or None past the last batch; called
            once per batch (it must not move the loader's own position).
        depth: batches in view (default: the reader's ``RemoteConfig.lookahead_batches``).
        many_rows: ``(k, n)`` -> the rows of batches ``k .. k+n-1`` (fewer past the last batch), computed at once
            (optional: one call instead of ``n``).
        share: the node's processes planning reads of it (``torch_drt._cpu_budget.node_processes``: their prefetch
            windows split the node cache's quarter).
    """

    def __init__(
        self,
        reader: CacheReader,
        batch_rows: BatchRows,
        depth: int | None = None,
        many_rows: ManyBatchRows | None = None,
        share: int = 1,
    ) -> None:
        self.reader = reader
        self.share = share
        self.batch_rows = batch_rows
        self.many_rows = many_rows
        self.active = reader.remote
        self.depth = depth if depth is not None else max(1, reader.lookahead_batches)
        if self.depth < 1:
            raise ValueError(f"depth={self.depth} must be >= 1")
        self._view: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self._planned_in: int | None = None  # the process whose prefetcher holds the last plan (``stop``)

    def before(self, k: int, rows: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Call before reading batch ``k``: batches ``k .. k + depth - 1`` are planned, in order.

        Args:
            k: the batch about to be read.
            rows: its (cache positions, sample ids) when the caller has them (not computed again after a start).
        """
        if not self.active:
            return
        view = self._view
        while view and view[0][0] < k:
            view.popleft()
        if view and view[0][0] != k:  # a jump (a resume, a new pass): start over
            view.clear()
        starting = not view  # a start or a jump: batch k's shards download before the rest of the view
        nxt = view[-1][0] + 1 if view else k
        end = min(k + self.depth, nxt + _FILL)
        computed = []
        if starting and rows is not None:
            computed, nxt = [self.reader.shard_groups(*rows)], k + 1
        for groups in [*computed, *self._groups(nxt, end - nxt)]:
            view.append((k + len(view), first_seen(groups)))
        if not view:
            return
        planned = first_seen(np.concatenate([g for _, g in view]))
        self._planned_in = os.getpid()
        self.reader.prefetch(planned, first=len(view[0][1]) if starting else 0, share=self.share)

    def stop(self) -> None:
        """Withdraw the plan (the loader is closed): downloads in flight finish, no further one starts. Only in the
        process that made it: a forked child that closes a loader it inherited (collected there: its ``__del__``)
        leaves the plan of its own prefetcher (one per process, the child's own reads') alone."""
        if not (self.active and self._view):
            return
        self._view.clear()
        if self._planned_in == os.getpid():
            self.reader.prefetch(np.empty(0, dtype=np.int64))

    def _groups(self, k: int, n: int) -> list[np.ndarray]:
        """The shard groups of each row of batches ``k .. k+n-1`` (fewer past the last batch)."""
        if n <= 0:
            return []
        if self.many_rows is None:
            out = []
            for j in range(k, k + n):
                rows = self.batch_rows(j)
                if rows is None:
                    break
                out.append(self.reader.shard_groups(*rows))
            return out
        batches = self.many_rows(k, n)
        if not batches:
            return []
        groups = self.reader.shard_groups(np.concatenate([c for c, _ in batches]),
                                          np.concatenate([s for _, s in batches]))
        return np.split(groups, np.cumsum([len(s) for _, s in batches])[:-1])
