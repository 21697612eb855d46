"""RowStream: the one way a cache stream position becomes rows of a table.

A stream is an order read by a consumer in a layout. The orders (``torch_drt.cache._row_orders.ORDERS``, each a
small function chosen by name) are ``"sequential"`` (the cyclic walk), ``"permutation"`` (every row once per
epoch of ``len(table)`` positions, a keyed permutation per epoch), ``"shard_window"`` (the locality-aware exact
shuffle) and ``"weighted"`` (draws by weight with replacement). The layouts:

* ``"replicate"``: every consumer reads the whole table. Exact orders are shared by blocks (a consumer reads its
  block of each pass, ``block``); draws and the sequential walk are the consumer's own. A ``CachedDataset`` is
  the one consumer of one rank.
* ``"split"``: each consumer reads its span of rows (``span``): sequentially, in the shard-window order of its
  span, or over its span of a keyed permutation of the rows.
* ``"stride"``: rank ``r`` of ``W`` reads positions ``r, r+W, ...`` of one order (``CacheSampler``); weighted
  draws are then a stream per rank.

The draw stream of a consumer is derived once (``stream_key``); a row is a pure function of the settings and
the position, so any window is computed directly and read-ahead (``read_ahead``) knows the future.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from torch_drt.cache._row_orders import LAYOUTS, ORDERS, REPLICATE, STRIDE, Consumer, OrderInputs, stream_key
from torch_drt.cache.read_ahead import ReadAhead
from torch_drt.cache.reader import CacheReader
from torch_drt.sampling.budget import ConsumerPlan, first_positions
from torch_drt.sampling.stride import consumer_number, stride_positions, world_total

ONE = Consumer()  # the one consumer of one rank (a CachedDataset)

Span = Callable[[int], "tuple[int, int] | None"]


def order_name(shuffle: bool, window: int | None = None, sampling: str | None = None) -> str:
    """The order of a stream's settings: ``"sequential"`` unless shuffled, then ``"shard_window"`` with a window,
    else ``sampling`` (``"permutation"`` or ``"weighted"``).

    Raises:
        ValueError: for another ``sampling``.
    """
    if not shuffle:
        return "sequential"
    if window is not None:
        return "shard_window"
    if sampling not in ("permutation", "weighted"):
        raise ValueError(f"sampling={sampling!r} must be 'permutation' or 'weighted'")
    return sampling


def stream_id(plan: ConsumerPlan, consumers: int) -> int:
    """The draw stream of the cache loader's consumer ``plan`` (``consumers``: per rank), as ``stream_key`` gives."""
    return stream_key(REPLICATE, Consumer(plan.rank, 1, plan.worker, consumers))


class RowStream:
    """The rows a consumer reads at each position of its stream over ``table`` (see the module docstring).

    Args:
        order: a name in ``ORDERS``.
        table: the rows: an ``ActiveTable`` (with ``weights``) or a mapped ``Snapshot`` (with ``cum_weights``).
        seed: the stream seed.
        layout: ``"replicate"``, ``"split"`` or ``"stride"``.
        who: the consumer.
        span: a consumer's ``(offset, length)`` rows (sequential, and split layouts), or None (the whole table).
        block: a replicated consumer's ``(budget, offset, total, backward)`` in an exact order shared by blocks.
        window: the shard-window order's window.
        reader: the caches' reader (the shard-window order groups rows by shard).
        what: what reads the stream, named when an exact order refuses unequal weights.

    Raises:
        ValueError: for an unknown order or layout, or an exact order over rows of unequal weights.
    """

    def __init__(
        self,
        order: str,
        table: Any,
        *,
        seed: int,
        layout: str = REPLICATE,
        who: Consumer = ONE,
        span: tuple[int, int] | None = None,
        block: tuple[int, int, int, bool] | None = None,
        window: int | None = None,
        reader: CacheReader | None = None,
        what: str = "shuffle=True",
    ) -> None:
        if order not in ORDERS:
            raise ValueError(f"order={order!r} must be one of {sorted(ORDERS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout={layout!r} must be one of {list(LAYOUTS)}")
        self.order, self.layout, self.who, self.table = order, layout, who, table
        inputs = OrderInputs(len(table), table.cache_pos, table.sample_ids, getattr(table, "weights", None),
                             getattr(table, "cum_weights", None), seed, layout, who, span, block, window, reader, what)
        self._population, self._order = ORDERS[order](inputs)
        self._strided = layout == STRIDE and order != "weighted"  # a rank's own draws are not strided

    @classmethod
    def of_consumer(
        cls,
        plans: tuple[ConsumerPlan, ...],
        index: int,
        table: Any,
        *,
        order: str,
        seed: int,
        partition: str,
        world_size: int,
        window: int | None = None,
        reader: CacheReader | None = None,
    ) -> RowStream:
        """The stream of the cache loader's consumer ``plans[index]`` (one of its rank's ``plans``)."""
        plan = plans[index]
        who = Consumer(plan.rank, world_size, plan.worker, len(plans))
        block = None
        if partition == REPLICATE:
            local = sum(p.sample_count for p in plans)
            block = (plan.sample_count, first_positions(plans)[plan.worker], world_total(local, world_size=world_size),
                     consumer_number(plan.rank, plan.worker, per_rank=len(plans)) % 2 == 1)
        return cls(order, table, seed=seed, layout=partition, who=who, span=(plan.offset, plan.population_size),
                   block=block, window=window, reader=reader)

    def rows(self, start: int, count: int) -> np.ndarray:
        """The table rows at this consumer's stream positions ``start .. start+count-1`` (int64)."""
        if self._strided:
            who = self.who
            return self._order.at(stride_positions(start, count, rank=who.rank, world_size=who.world_size))
        local = self._order.draws(start, count)
        return local if self._population is None else self._population[local]

    def keys(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (cache positions, sample ids) of table ``rows``: what the reader reads and prefetches."""
        return self.table.cache_pos[rows], self.table.sample_ids[rows]

    def spans_rows(self, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """The rows of each ``(start, count)`` of ``spans``, drawn at once where they run on."""
        if spans and all(a + c == b for (a, c), (b, _) in itertools.pairwise(spans)):
            counts = [c for _, c in spans]
            return np.split(self.rows(spans[0][0], sum(counts)), np.cumsum(counts)[:-1])
        return [self.rows(start, count) for start, count in spans]

    def read_ahead(self, reader: CacheReader, span: Span, depth: int | None = None, share: int = 1) -> ReadAhead:
        """The read-ahead of a reader of this stream whose batch ``k`` is positions ``span(k) = (start, count)``
        (None past the last batch): ``before(k)`` hands ``reader`` the shards of the next batches (``share``: the
        node's processes planning reads, see ``ReadAhead``)."""

        def many(k: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
            spans = list(itertools.takewhile(lambda s: s is not None, map(span, range(k, k + n))))  # no None
            return [self.keys(rows) for rows in self.spans_rows(cast("list[tuple[int, int]]", spans))]

        def one(k: int) -> tuple[np.ndarray, np.ndarray] | None:
            return next(iter(many(k, 1)), None)

        return ReadAhead(reader, one, depth, many_rows=many, share=share)

    def __repr__(self) -> str:
        return f"RowStream({self.order!r}, layout={self.layout!r}, {self.who}, rows={len(self.table)})"

