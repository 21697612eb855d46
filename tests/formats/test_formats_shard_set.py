"""ShardSet, the base of every foreign reader: sample i lies in the shard its counts say, negative indices count
from the end as for a list, each shard is decoded once while it stays in the bounded per-process LRU, and the
shard of every sample feeds the locality-aware permutation."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from torch_drt.formats import ShardSet
from torch_drt.sampling.locality import ShardWindowShuffle


class Counting(ShardSet):
    """Shard s holds samples (s, 0), (s, 1), ...; counts each decode."""

    def __init__(self, counts, cache_shards=2, cache_bytes=0):
        super().__init__(counts, [f"shard{s}" for s in range(len(counts))], cache_shards, cache_bytes)
        self.loads: list[int] = []

    def _load(self, shard):
        self.loads.append(shard)
        return [{"shard": shard, "index": i} for i in range(int(self.shard_counts[shard]))]

    def _sample(self, decoded, shard, index):
        return decoded[index]

    def _nbytes(self, decoded):
        return 100 * len(decoded)


def test_samples_lie_in_the_shards_their_counts_say():
    ds = Counting([3, 0, 2, 4])
    assert len(ds) == 9 and ds.num_shards == 4
    assert [(s["shard"], s["index"]) for s in (ds[i] for i in range(9))] == [
        (0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2), (3, 3)]
    assert ds[-1] == ds[8] and ds[np.int64(4)] == ds[4]
    for bad in (9, -10):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(TypeError):
        ds[1.5]
    assert ds.shard_groups().tolist() == [0, 0, 0, 2, 2, 3, 3, 3, 3]


def test_each_shard_is_decoded_once_while_it_stays_in_the_lru():
    ds = Counting([2, 2, 2], cache_shards=2)
    ds.__getitems__([0, 1, 2, 3, 0, 2])
    assert ds.loads == [0, 1]
    ds[4]  # a third shard: the least recently used one (0) goes
    ds[2]
    ds[0]
    assert ds.loads == [0, 1, 2, 0] and len(ds._lru) == 2
    copy = pickle.loads(pickle.dumps(ds))  # a worker starts with an empty LRU
    assert len(copy._lru) == 0 and copy[5] == ds[5]


def test_threads_read_one_dataset_at_once():
    ds = Counting([5] * 8, cache_shards=3)
    errors = []

    def read(seed):
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, len(ds), 200).tolist():
            if ds[i]["shard"] != i // 5:
                errors.append(i)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ds._lru) <= 3


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="cache_shards"):
        Counting([1], cache_shards=0)
    with pytest.raises(ValueError, match="len"):
        ShardSet.__init__(Counting.__new__(Counting), [1, 2], ["a"])


def test_the_shards_feed_the_locality_aware_permutation():
    ds = Counting([4, 3, 5, 2])
    order = ShardWindowShuffle(ds.shard_groups(), window=1, seed=7).indices(0, np.arange(len(ds)))
    assert sorted(order.tolist()) == list(range(len(ds)))
    shards = [ds[int(i)]["shard"] for i in order]
    runs = [s for k, s in enumerate(shards) if k == 0 or shards[k - 1] != s]
    assert sorted(runs) == [0, 1, 2, 3]  # one shard at a time: each shard's samples come together


def test_places_of_a_batch_are_each_index_located():
    ds = Counting([3, 0, 2, 4])
    picks = [8, 0, -1, 3, np.int64(5), -9, 2]
    shards, local = ds.places(picks)
    assert list(zip(shards.tolist(), local.tolist())) == [ds.locate(i) for i in picks]
    assert [s["index"] for s in ds.__getitems__(picks)] == [ds[i]["index"] for i in picks]
    assert ds.places([])[0].tolist() == [] and ds.places([True])[0].tolist() == [0]
    for bad in ([1, 9], [-10], [0, 1.5]):
        with pytest.raises((IndexError, TypeError)):
            ds.places(bad)


def test_cache_bytes_keeps_more_decoded_shards_while_they_fit():
    ds = Counting([2] * 6, cache_shards=1, cache_bytes=600)  # 200 bytes a shard: three fit
    for _ in range(2):
        ds.__getitems__([0, 2, 4])
    assert ds.loads == [0, 1, 2] and len(ds._lru) == 3
    ds.__getitems__([6, 8])  # two more: the oldest two go
    assert list(ds._lru) == [2, 3, 4]
    ds = Counting([2] * 6, cache_shards=2, cache_bytes=0)  # bytes not counted: two shards
    ds.__getitems__([0, 2, 4])
    assert list(ds._lru) == [1, 2]
    with pytest.raises(ValueError, match="cache_bytes"):
        Counting([1], cache_bytes=-1)
