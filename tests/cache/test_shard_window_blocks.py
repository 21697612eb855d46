"""Consumers sharing one shard-window order by blocks: together they read every row once per pass, and as odd
epochs walk the shard sequence backward each consumer's block is mirrored, so it starts an epoch on the shards it
read last. Two nodes (each with its own cache) then re-read their own shards: the second epoch downloads about
half of each node's share, not everything. Every other consumer reads its block from its end, so neighbours read
the window they share at the same time: consumers sharing one node cache download it once."""

from __future__ import annotations

import numpy as np
import pytest
from lru_shards import LruShards

from torch_drt.sampling.locality import ShardWindowShuffle
from torch_drt.sampling.shard_order import ShardWindowOrder

SHARDS, PER = 64, 40
GROUPS = np.repeat(np.arange(SHARDS), PER)


def _orders(consumers: int, window: int = 4) -> list[ShardWindowOrder]:
    budget = len(GROUPS) // consumers
    shuffle = ShardWindowShuffle(GROUPS, window=window, seed=5)
    return [ShardWindowOrder(shuffle, budget, c * budget, len(GROUPS), c % 2 == 1) for c in range(consumers)]


def _lru_fetches(streams: list[list[int]], capacity: int) -> int:
    """Shards fetched by consumers reading their streams in lockstep (a batch each in turn) through one LRU."""
    cache = LruShards(capacity)
    return sum(cache.read(g) for step in zip(*streams) for g in step)


@pytest.mark.parametrize("consumers", [1, 2, 3, 4])
def test_the_blocks_cover_every_row_once_per_pass_odd_passes_too(consumers):
    orders = _orders(consumers)
    budget = orders[0].budget
    for p in range(4):
        rows = np.concatenate([o.draws(p * budget, budget) for o in orders])
        assert len(np.unique(rows)) == len(rows) == consumers * budget  # no row twice in a pass
        if consumers * budget == len(GROUPS):
            assert np.array_equal(np.sort(rows), np.arange(len(GROUPS)))  # every row once


def test_an_odd_pass_starts_on_the_shards_the_consumer_read_last():
    for o in _orders(2):
        last = set(GROUPS[o.draws(o.budget - 8 * PER, 8 * PER)])  # the shards of the end of pass 0
        first = set(GROUPS[o.draws(o.budget, PER)])  # those of the start of pass 1
        assert first <= last, (first, last)


def test_two_nodes_with_half_caches_re_read_their_own_shards():
    orders = _orders(2)
    budget, capacity = orders[0].budget, SHARDS // 4  # each node caches half of its own share
    for node, order in enumerate(orders):
        cache = LruShards(capacity)
        fetched = [sum(cache.read(g) for g in GROUPS[order.draws(p * budget, budget)].tolist()) for p in range(3)]
        share = fetched[0]
        assert share <= SHARDS // 2 + 4  # a node reads its own block's shards (and the window at the boundary)
        assert fetched[1] <= 0.6 * share and fetched[2] <= 0.6 * share, (node, fetched)


@pytest.mark.parametrize("consumers", [2, 4])
def test_consumers_of_one_node_download_each_shard_once_then_about_half(consumers):
    orders = _orders(consumers)
    budget = orders[0].budget

    def batches(order: ShardWindowOrder, p: int) -> list[int]:  # the distinct shards of each batch of 20 rows
        shards = GROUPS[order.draws(p * budget, budget)].reshape(-1, 20)
        return [g for batch in shards for g in dict.fromkeys(batch.tolist())]

    first = _lru_fetches([batches(o, 0) for o in orders], capacity=SHARDS // 2)
    assert first <= SHARDS + 1  # the windows two neighbours share are read by both at once
    both = _lru_fetches([batches(o, 0) + batches(o, 1) for o in orders], capacity=SHARDS // 2)
    assert both - first <= 0.55 * SHARDS
