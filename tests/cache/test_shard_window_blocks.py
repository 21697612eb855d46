"""Consumers sharing one shard-window order by blocks: together they read every row once per pass, and as odd
epochs walk the shard sequence backward each consumer's block is mirrored, so it starts an epoch on the shards it
read last. Two nodes (each with its own cache) then re-read their own shards: the second epoch downloads about
half of each node's share, not everything."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from torch_drt.cache.shard_order import ShardWindowOrder
from torch_drt.sampling.locality import ShardWindowShuffle

SHARDS, PER = 64, 40
GROUPS = np.repeat(np.arange(SHARDS), PER)


def _orders(consumers: int, window: int = 4) -> list[ShardWindowOrder]:
    budget = len(GROUPS) // consumers
    return [ShardWindowOrder(ShardWindowShuffle(GROUPS, window=window, seed=5), budget, c * budget, len(GROUPS))
            for c in range(consumers)]


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
        cache: collections.OrderedDict = collections.OrderedDict()
        fetched: collections.Counter = collections.Counter()
        for p in range(3):
            for g in GROUPS[order.draws(p * budget, budget)].tolist():
                if g in cache:
                    cache.move_to_end(g)
                    continue
                fetched[p] += 1
                cache[g] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
        share = fetched[0]
        assert share <= SHARDS // 2 + 4  # a node reads its own block's shards (and the window at the boundary)
        assert fetched[1] <= 0.6 * share and fetched[2] <= 0.6 * share, (node, fetched)
