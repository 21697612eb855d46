"""The orders a ``RowStream`` reads, each a small function chosen by name (``ORDERS``), and the one derivation
of a consumer's draw stream (``stream_key``).

An order function takes what the stream is built from (``OrderInputs``) and returns ``(population, order)``:
``order.draws(start, count)`` gives rows of the population at stream positions ``start .. start+count-1``
(``order.at(positions)`` too where a layout strides over it), and ``population`` maps them to table rows (None:
they are table rows already).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import numpy as np

from torch_drt.cache.reader import CacheReader
from torch_drt.sampling._counter import derive_key
from torch_drt.sampling.locality import ShardWindowShuffle
from torch_drt.sampling.permutation import KeyedPermutation
from torch_drt.sampling.shard_order import EpochPermutations, ShardWindowOrder, check_equal_weights
from torch_drt.sampling.stride import consumer_number
from torch_drt.sampling.weighted import WeightedDraws

REPLICATE, SPLIT, STRIDE = "replicate", "split", "stride"
LAYOUTS = (REPLICATE, SPLIT, STRIDE)


class Consumer(NamedTuple):
    """Who reads a stream: consumer ``index`` of the ``per_rank`` consumers of ``rank`` of ``world_size`` ranks."""

    rank: int = 0
    world_size: int = 1
    index: int = 0  # type: ignore[assignment]  # the field shadows tuple.index, as meant (mypy flags the name)
    per_rank: int = 1


def stream_key(layout: str, who: Consumer) -> int:
    """The draw stream of a consumer (the seed and the epoch enter in the orders' keys).

    A consumer's number among all ranks' consumers (``rank * per_rank + index``: the cache loader's consumers and a
    ``CachedDataset``, consumer 0 of one), except in the ``"stride"`` layout, where a rank's own stream is keyed by
    ``(rank, world_size)`` (``CacheSampler``'s weighted draws).
    """
    if layout == STRIDE:
        return derive_key(who.rank, who.world_size)
    return consumer_number(who.rank, who.index, per_rank=who.per_rank)


class Cyclic:
    """The sequential walk: stream position ``s`` is row ``(offset + s mod length) mod rows``."""

    def __init__(self, offset: int, length: int, rows: int) -> None:
        self.offset, self.length, self.rows = offset, length, rows

    def at(self, positions: np.ndarray) -> np.ndarray:
        return (self.offset + np.asarray(positions, dtype=np.int64) % self.length) % self.rows

    def draws(self, start: int, count: int) -> np.ndarray:
        return self.at(np.arange(start, start + count, dtype=np.int64))


class OrderInputs(NamedTuple):
    """What an order is built from.

    Attributes:
        rows: the table's rows.
        cache_pos, sample_ids: the rows' identities (a shard-window order groups them by shard).
        weights: per row, or None where only ``cum_weights`` are at hand (exact orders then check nothing: the
            caller checked its table).
        cum_weights: the cumulative weights (a mapped snapshot's column), or None.
        seed: the stream seed.
        layout: ``"replicate"``, ``"split"`` or ``"stride"``.
        who: the consumer.
        span: a split consumer's ``(offset, length)`` rows (wrapping), or None (the whole table).
        block: a replicated consumer's ``(budget, offset, total, backward)`` in an order shared by blocks, or None.
        window: the shard-window order's window.
        reader: the caches' reader (a shard-window order groups the rows by shard), or None.
        what: what reads the stream, named when an exact order refuses unequal weights.
    """

    rows: int
    cache_pos: np.ndarray
    sample_ids: np.ndarray
    weights: np.ndarray | None
    cum_weights: np.ndarray | None
    seed: int
    layout: str
    who: Consumer
    span: tuple[int, int] | None
    block: tuple[int, int, int, bool] | None
    window: int | None
    reader: CacheReader | None
    what: str

    def span_rows(self) -> np.ndarray:
        offset, length = self.span or (0, self.rows)
        return (offset + np.arange(length, dtype=np.int64)) % self.rows


Built = tuple[np.ndarray | None, Any]


def sequential(o: OrderInputs) -> Built:
    """The cyclic walk of the consumer's span (the whole table by default)."""
    offset, length = o.span or (0, o.rows)
    return None, Cyclic(offset, length, o.rows)


def permutation(o: OrderInputs) -> Built:
    """Every row once per epoch: a keyed permutation per epoch; shared by blocks (replicate), or per split consumer
    its own epochs over its span of a keyed permutation of the rows."""
    check_equal_weights(o.weights, o.what)
    if o.layout == SPLIT:
        population = KeyedPermutation(o.rows, o.seed)(o.span_rows())
        return population, EpochPermutations(len(population), derive_key(o.seed, stream_key(o.layout, o.who)))
    order = EpochPermutations(o.rows, o.seed)
    if o.block is None:
        return None, order
    budget, offset, total, _ = o.block
    return None, ShardWindowOrder(order, budget, offset, total, mirror=False)


def shard_window(o: OrderInputs) -> Built:
    """The locality-aware exact shuffle (``torch_drt.sampling.shard_order``): over the whole table (shared by blocks,
    mirrored in odd passes), or over a split consumer's contiguous span (locality is the point)."""
    if o.reader is None or o.window is None:
        raise ValueError("the shard-window order needs a window and the caches' reader")
    if o.weights is not None:
        check_equal_weights(o.weights)
    if o.layout == SPLIT:
        span = o.span_rows()
        return span, shard_window_order(o.reader, o.cache_pos[span], o.sample_ids[span], None,
                                        window=o.window, seed=o.seed)
    return None, shard_window_order(o.reader, o.cache_pos, o.sample_ids, None, window=o.window,
                                    seed=o.seed, block=o.block)


def weighted(o: OrderInputs) -> Built:
    """Draws by weight with replacement, a stream per consumer (``stream_key``): over the whole table, or over a
    split consumer's span of a keyed permutation of the rows."""
    stream = stream_key(o.layout, o.who)
    if o.layout == SPLIT:
        population = KeyedPermutation(o.rows, o.seed)(o.span_rows())
        per_row = o.weights if o.cum_weights is None else np.diff(o.cum_weights, prepend=0.0)
        assert per_row is not None  # weights are given where cumulative ones are not (OrderInputs)
        return population, WeightedDraws(per_row[population], o.seed, stream=stream)
    if o.cum_weights is not None:
        return None, WeightedDraws.from_cumulative(o.cum_weights, o.seed, stream=stream)
    # weights are given where cumulative ones are not (a table of neither fails in WeightedDraws, as ever)
    return None, WeightedDraws(cast("np.ndarray", o.weights), o.seed, stream=stream)


ORDERS: dict[str, Callable[[OrderInputs], Built]] = {
    "sequential": sequential,
    "permutation": permutation,
    "shard_window": shard_window,
    "weighted": weighted,
}


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
