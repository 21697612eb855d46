"""ShardWindowShuffle: an exact permutation per epoch, O(1) to resume, a bounded working set of shards, and a
second epoch that starts where the first ended (what keeps a half-size node cache useful)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lru_shards import LruShards

from torch_drt.sampling.locality import ShardWindowShuffle


def _groups(shards: int, per: int, seed: int = 0) -> np.ndarray:
    sizes = np.random.default_rng(seed).integers(1, per + 1, shards)
    groups = np.repeat(np.arange(shards), sizes)
    return groups[np.random.default_rng(seed + 1).permutation(len(groups))]  # rows of a shard need not be adjacent


@settings(max_examples=40, deadline=None)
@given(shards=st.integers(1, 40), per=st.integers(1, 30), window=st.integers(1, 8), seed=st.integers(0, 2**32),
       epoch=st.integers(0, 5))
def test_every_epoch_is_a_permutation_with_at_most_window_shards_open(shards, per, window, seed, epoch):
    groups = _groups(shards, per, seed % 1000)
    order = ShardWindowShuffle(groups, window=window, seed=seed)
    rows = order.indices(epoch, np.arange(len(groups)))
    assert sorted(rows.tolist()) == list(range(len(groups)))
    seen, open_now = [], set()
    first = {g: i for i, g in reversed(list(enumerate(groups[rows].tolist())))}
    last = {g: i for i, g in enumerate(groups[rows].tolist())}
    for i in range(len(rows)):  # shards whose first read is done and last read is not yet: at most 2 windows
        open_now = {g for g in first if first[g] <= i <= last[g]}
        seen.append(len(open_now))
    assert max(seen) <= 2 * window


def test_windows_mix_whole_shards_and_each_epoch_reshuffles():
    groups = _groups(20, 10)
    order = ShardWindowShuffle(groups, window=4, seed=7)
    e0, e1, e2 = (order.indices(e, np.arange(len(groups))) for e in range(3))
    assert not np.array_equal(e0, e2) and not np.array_equal(e0, e1)
    assert not np.array_equal(order.indices(0, np.arange(len(groups))),
                              ShardWindowShuffle(groups, window=4, seed=8).indices(0, np.arange(len(groups))))
    runs = np.count_nonzero(np.diff(groups[e0]) != 0)
    assert runs > 2 * 20  # rows of the window's shards interleave (not one shard after another)


def test_any_window_of_the_stream_equals_the_same_slice_of_a_long_read():
    groups = _groups(30, 12)
    order = ShardWindowShuffle(groups, window=3, seed=1)
    whole = order.draws(0, 5 * len(groups))
    for start, count in [(0, 7), (len(groups) - 3, 10), (3 * len(groups) + 5, 40), (10**6, 5)]:
        fresh = ShardWindowShuffle(groups, window=3, seed=1)  # a resumed process: nothing computed before
        got = fresh.draws(start, count)
        if start + count <= len(whole):
            assert np.array_equal(got, whole[start : start + count])
        else:
            assert np.array_equal(got, order.indices(start // len(groups),
                                                     np.arange(start, start + count) % len(groups)))


def _lru_downloads(stream: np.ndarray, groups: np.ndarray, capacity: int) -> collections.Counter:
    cache, fetched = LruShards(capacity), collections.Counter()
    epoch_of = np.arange(len(stream)) // len(groups)
    for row, epoch in zip(stream.tolist(), epoch_of.tolist()):
        fetched[epoch] += cache.read(int(groups[row]))
    return fetched


@pytest.mark.parametrize("window", [1, 2, 4])
def test_with_a_cache_of_half_the_shards_later_epochs_fetch_about_half(window):
    shards = 100
    groups = np.repeat(np.arange(shards), 50)
    order = ShardWindowShuffle(groups, window=window, seed=11)
    fetched = _lru_downloads(order.draws(0, 4 * len(groups)), groups, capacity=shards // 2)
    assert fetched[0] == shards
    for epoch in (1, 2, 3):
        assert fetched[epoch] <= 0.55 * shards, fetched


def test_a_plain_shuffle_refetches_nearly_everything():  # the problem the locality order solves
    shards = 100
    groups = np.repeat(np.arange(shards), 50)
    rng = np.random.default_rng(0)
    stream = np.concatenate([rng.permutation(len(groups)) for _ in range(2)])
    assert _lru_downloads(stream, groups, capacity=shards // 2)[1] > 0.9 * shards


def test_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        ShardWindowShuffle(np.zeros(3), window=0, seed=0)
    with pytest.raises(ValueError, match="non-empty"):
        ShardWindowShuffle(np.zeros(0), window=1, seed=0)
    with pytest.raises(IndexError):
        ShardWindowShuffle(np.zeros(3), window=1, seed=0).indices(0, np.array([3]))


@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=60), st.booleans())
def test_rows_grouped_in_order_skip_the_sort_and_keep_the_order(groups, grouped):
    groups = np.asarray(sorted(groups) if grouped else groups, dtype=np.int64)
    order = ShardWindowShuffle(groups, window=2, seed=3)
    rows = np.argsort(groups, kind="stable")  # how every order was built before the shortcut
    _, first, counts = np.unique(groups[rows], return_index=True, return_counts=True)
    assert np.array_equal(order._first, first) and np.array_equal(order.counts, counts)
    assert (order._rows is None) == bool(np.all(groups[1:] >= groups[:-1]))
    if order._rows is not None:
        assert np.array_equal(order._rows, rows)
    else:
        assert np.array_equal(rows, np.arange(len(groups)))
