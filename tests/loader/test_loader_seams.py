"""The seams with torch (issue 21): the same script with only the loader class swapped gives torch's data.

torch's ``DataLoader`` is the oracle, run side by side in the same processes.
"""

from __future__ import annotations

import inspect
import json
import random

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from s3_server import free_port
from seams_job import EPOCHS, N, run
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from torch_drt import StatefulDataLoader


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("seams") / "out.json"
    # forked ranks (this process has imported torch already; two spawned interpreters cost seconds each to start):
    # the ranks are still real processes with their own gloo group
    mp.start_processes(run, args=(2, free_port(), str(out)), nprocs=2, join=True, start_method="fork")
    return json.loads(out.read_text())


def test_a_distributed_sampler_is_not_sharded_again(two_ranks):
    torch_ranks = [r["torch/distributed"] for r in two_ranks]
    drt_ranks = [r["drt/distributed"] for r in two_ranks]
    assert drt_ranks == torch_ranks  # the same items, in the same order, on each rank and epoch
    for epoch in range(EPOCHS):
        assert sorted(drt_ranks[0][epoch] + drt_ranks[1][epoch]) == list(range(N))  # 20 each, 40 distinct


def test_set_epoch_reaches_the_users_sampler(two_ranks):
    assert all(r["drt/sampler_is_users"] == [[True]] for r in two_ranks)
    drt = two_ranks[0]["drt/distributed"]
    assert drt[0] != drt[1]  # a new order each epoch, as DistributedSampler.set_epoch gives


def test_no_split_by_rank_with_torchs_arguments(two_ranks):
    for r in two_ranks:
        assert r["drt/early"] == r["torch/early"] == [list(range(N))] * EPOCHS  # every rank sees everything
        assert r["drt/late"] == r["torch/late"] == [list(range(N))] * EPOCHS  # also once the group exists


def test_split_by_rank_is_resolved_when_iteration_starts(two_ranks):
    unbatched = [r["drt/split_unbatched"] for r in two_ranks]
    assert unbatched[0] == [list(range(0, N, 2))] * EPOCHS and unbatched[1] == [list(range(1, N, 2))] * EPOCHS
    ranks = [r["drt/split"] for r in two_ranks]
    for epoch in range(EPOCHS):
        assert len(ranks[0][epoch]) == len(ranks[1][epoch]) == N // 2
        assert sorted(ranks[0][epoch] + ranks[1][epoch]) == list(range(N))
    assert ranks[0][0] != ranks[0][1]


def test_a_sampler_with_a_rank_split_is_refused():
    sampler = DistributedSampler(list(range(8)), num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="used as given"):
        StatefulDataLoader(list(range(8)), sampler=sampler, split_by_rank=True)
    with pytest.raises(ValueError, match="used as given"):
        StatefulDataLoader(list(range(8)), sampler=sampler, world_size=2, rank=0)
    StatefulDataLoader(list(range(8)), sampler=sampler, world_size=1, rank=0)  # no split: allowed


def test_loader_sampler_is_torchs_kind():
    data = list(range(10))
    sampler = SequentialSampler(data)
    assert StatefulDataLoader(data, sampler=sampler).sampler is sampler
    assert type(StatefulDataLoader(data).sampler) is SequentialSampler
    shuffled = StatefulDataLoader(data, shuffle=True, seed=3, batch_size=4, collate_fn=list)
    assert isinstance(shuffled.sampler, RandomSampler)
    assert list(shuffled.sampler) == [x for b in shuffled for x in b]  # it describes the loader's order
    assert type(shuffled.batch_sampler).__name__ == "BatchSampler"
    assert type(DataLoader(data, shuffle=True).batch_sampler) is type(shuffled.batch_sampler)
    assert StatefulDataLoader(data, batch_size=None).batch_sampler is None
    batches = BatchSampler(SequentialSampler(data), 3, False)
    with_batches = StatefulDataLoader(data, batch_sampler=batches)
    assert with_batches.batch_sampler is batches and with_batches.batch_size is None
    assert type(with_batches.sampler) is type(DataLoader(data, batch_sampler=batches).sampler)  # not a split view


def test_a_loader_recreated_from_its_attributes_is_the_same_loader():
    """Lightning re-creates a loader from ``vars(loader)`` (a loader built outside its hooks): same data, seed."""
    loader = StatefulDataLoader(list(range(6)), batch_size=None, collate_fn=lambda x: x * 10, shuffle=True, seed=4)
    params = inspect.signature(StatefulDataLoader.__init__).parameters
    again = StatefulDataLoader(**{k: v for k, v in vars(loader).items() if k in params and k != "self"})
    assert list(again) == list(loader) and again.seed == 4


class Draws(torch.utils.data.Dataset):
    """Draws from the global generators in __getitem__ (torch's reproducibility recipe)."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return i, info.id, random.random(), float(np.random.rand()), float(torch.rand(()))


def seed_worker(worker_id):
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def _recipe(cls):
    g = torch.Generator()
    g.manual_seed(0)
    loader = cls(Draws(), batch_size=2, num_workers=2, worker_init_fn=seed_worker, generator=g, collate_fn=list)
    return [item for batch in loader for item in batch]


def test_torchs_reproducibility_recipe_reproduces():
    runs = [_recipe(StatefulDataLoader) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    torch_run = _recipe(DataLoader)
    assert [(i, w) for i, w, *_ in runs[0]] == [(i, w) for i, w, *_ in torch_run]  # the same worker per batch
    draws = [d for *_, d in runs[0]]
    assert len(set(draws)) == len(draws)  # each worker its own generator state


class RangeStream(IterableDataset):
    """torch's documented IterableDataset, sharded in worker_init_fn."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))


def shard_worker(worker_id):
    info = torch.utils.data.get_worker_info()
    dataset = info.dataset
    overall_start, overall_end = dataset.start, dataset.end
    per_worker = int(np.ceil((overall_end - overall_start) / float(info.num_workers)))
    dataset.start = overall_start + info.id * per_worker
    dataset.end = min(dataset.start + per_worker, overall_end)


def test_torchs_iterable_worker_init_fn_sharding_example():
    expected = sorted(int(x) for x in DataLoader(RangeStream(3, 70), num_workers=2, worker_init_fn=shard_worker))
    assert expected == list(range(3, 70))
    for _ in range(5):
        got = StatefulDataLoader(RangeStream(3, 70), num_workers=2, worker_init_fn=shard_worker)
        assert sorted(int(x) for x in got) == expected


def test_thread_workers_refuse_per_worker_sharding_of_a_stream():
    with pytest.raises(ValueError, match='worker_method="process"'):
        StatefulDataLoader(RangeStream(0, 10), num_workers=2, worker_init_fn=shard_worker, worker_method="thread")
    threads = StatefulDataLoader(RangeStream(0, 10), num_workers=2, worker_method="thread")
    assert sorted(int(x) for x in threads) == list(range(10))  # without worker_init_fn: every item once


def test_process_workers_are_the_default():
    loader = StatefulDataLoader(list(range(4)), num_workers=2)
    assert loader.worker_method == "process"
    assert StatefulDataLoader(list(range(4)), num_workers=2, worker_method="thread").worker_method == "thread"
