"""torch_drt.nodes: cache sampler, reader and weighted mixer as torchdata nodes."""

from __future__ import annotations

import collections

import pytest
from conftest import ListSource, payload
from nodes_harness import check_save_load
from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper, Prefetcher

import torch_drt as drt
from torch_drt.nodes import CacheReaderNode, CacheSampler, WeightedMixer

QUIET = drt.WriterConfig(show_progress=False)


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("n", 30)], tmp_path, reader_config=drt.ReaderConfig(seed=2),
                                     writer_config=QUIET)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("midpoint", [0, 7, 29])
def test_sampler_save_load(dataset, shuffle, midpoint):
    check_save_load(CacheSampler(dataset, shuffle=shuffle, num_samples=30), midpoint)


def test_sequential_sampler_shards_disjointly_and_continues_across_epochs(dataset):
    ranks = [list(Loader(CacheSampler(dataset, shuffle=False, rank=r, world_size=3))) for r in range(3)]
    assert sorted(x for r in ranks for x in r) == list(range(30))
    loader = Loader(CacheSampler(dataset, shuffle=False, num_samples=4))
    assert [list(loader), list(loader)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffled_sampler_streams_differ_by_rank_seed_and_world(dataset):
    def rows(**kw):
        return list(Loader(CacheSampler(dataset, shuffle=True, num_samples=20, **kw)))

    base = rows(seed=1, rank=0, world_size=2)
    assert base == rows(seed=1, rank=0, world_size=2)
    assert base != rows(seed=1, rank=1, world_size=2)
    assert base != rows(seed=2, rank=0, world_size=2)
    assert base != rows(seed=1, rank=0, world_size=3)


def test_sampler_refuses_a_state_of_another_table(dataset):
    sampler = CacheSampler(dataset, shuffle=True)
    loader = Loader(sampler)
    next(iter(loader))
    state = loader.state_dict()
    dataset.update_metadata(dataset.get_metadata().slice(0, 5))
    other = Loader(CacheSampler(dataset, shuffle=True))
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="different metadata table"):
        iter(other)


def test_reader_in_a_torchdata_pipeline(dataset):
    node = CacheReaderNode(Batcher(CacheSampler(dataset, shuffle=False), batch_size=4, drop_last=False), dataset)
    node = ParallelMapper(node, map_fn=lambda batch: [s.data for s in batch], num_workers=2, method="thread")
    node = Prefetcher(node, prefetch_factor=2)
    batches = list(Loader(node))
    assert [d for b in batches for d in b] == [payload(i) for i in range(30)]
    check_save_load(
        Prefetcher(CacheReaderNode(Batcher(CacheSampler(dataset, shuffle=True), batch_size=4), dataset), 2), 3
    )


def test_reader_single_rows_give_samples(dataset):
    sample = next(iter(Loader(CacheReaderNode(CacheSampler(dataset, shuffle=False), dataset))))
    assert sample.data == payload(0) and sample.metadata["label"] == 0


def _mixer(rank=0, world_size=1, seed=0, criteria="CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED"):
    sources = {"a": IterableWrapper(range(0, 40)), "b": IterableWrapper(range(100, 110))}
    return WeightedMixer(sources, {"a": 3.0, "b": 1.0}, seed=seed, stop_criteria=criteria, rank=rank,
                         world_size=world_size)


@pytest.mark.parametrize("midpoint", [0, 5, 12])
def test_mixer_save_load(midpoint):
    check_save_load(_mixer(criteria="ALL_DATASETS_EXHAUSTED"), midpoint)
    check_save_load(_mixer(rank=1, world_size=2, criteria="FIRST_DATASET_EXHAUSTED"), min(midpoint, 3))


def test_mixer_shards_each_source_across_ranks():
    per_rank = [list(Loader(_mixer(rank=r, world_size=2, criteria="ALL_DATASETS_EXHAUSTED"))) for r in range(2)]
    assert sorted(x for r in per_rank for x in r) == list(range(40)) + list(range(100, 110))
    assert not set(per_rank[0]) & set(per_rank[1])


def test_mixer_streams_are_distinct_and_weights_hold():
    base = _take(_mixer(criteria="CYCLE_FOREVER", seed=1, rank=0, world_size=2), 400)
    assert base == _take(_mixer(criteria="CYCLE_FOREVER", seed=1, rank=0, world_size=2), 400)
    assert base != _take(_mixer(criteria="CYCLE_FOREVER", seed=1, rank=1, world_size=2), 400)
    assert base != _take(_mixer(criteria="CYCLE_FOREVER", seed=2, rank=0, world_size=2), 400)
    assert base != _take(_mixer(criteria="CYCLE_FOREVER", seed=1, rank=0, world_size=3), 400)
    counts = collections.Counter("a" if x < 100 else "b" for x in _take(_mixer(criteria="CYCLE_FOREVER"), 4000))
    assert 0.72 < counts["a"] / 4000 < 0.78


def _take(node, n):
    it = iter(Loader(node))
    return [next(it) for _ in range(n)]


def test_mixer_validation():
    with pytest.raises(ValueError, match="must match"):
        WeightedMixer({"a": IterableWrapper([1])}, {"b": 1.0})
    with pytest.raises(ValueError, match="finite and > 0"):
        WeightedMixer({"a": IterableWrapper([1])}, {"a": 0.0})
    with pytest.raises(ValueError, match="stop_criteria"):
        WeightedMixer({"a": IterableWrapper([1])}, {"a": 1.0}, stop_criteria="NEVER")


def test_a_shuffled_sampler_reads_every_row_once_per_pass(dataset):
    """``shuffle=True`` means one thing in torch_drt: every row once per epoch, in a new seeded order."""
    n = len(dataset)
    one = list(Loader(CacheSampler(dataset, shuffle=True, seed=3, num_samples=n)))
    loader = Loader(CacheSampler(dataset, shuffle=True, seed=3, num_samples=n))
    first, second = list(loader), list(loader)
    assert sorted(first) == sorted(second) == list(range(n)) and first != second and first == one
    ranks = [list(Loader(CacheSampler(dataset, shuffle=True, seed=3, rank=r, world_size=2))) for r in range(2)]
    assert sorted(ranks[0] + ranks[1]) == list(range(n))  # the ranks split one permutation
    weighted = list(Loader(CacheSampler(dataset, shuffle=True, sampling="weighted", seed=3, num_samples=4 * n)))
    assert len(set(weighted)) < n or len(weighted) != len(set(weighted))  # draws with replacement repeat rows


def test_a_weighted_sampler_state_resumes_only_with_weighted_draws(dataset):
    loader = Loader(CacheSampler(dataset, shuffle=True, sampling="weighted"))
    next(iter(loader))
    state = loader.state_dict()
    other = Loader(CacheSampler(dataset, shuffle=True))
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="sampling='weighted' to resume it"):
        iter(other)
