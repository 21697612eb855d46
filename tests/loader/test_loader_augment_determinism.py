"""Issue 12 item 4: augmented batches are bit-identical under any num_workers, worker method, batch size, world
size, and after a mid-epoch resume (real torch_drt augmentations drawing from each item's generator)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from augment_job import DATA, collect, epochs, loader, rank_job


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference() -> dict:
    ref = epochs(batch_size=4)
    assert len(ref) == 2 * len(DATA)
    first = [ref[(0, i)] for i in range(len(DATA))]
    assert len({t.numpy().tobytes() for t in first}) == len(DATA)  # every item its own augmentation
    assert not all(torch.equal(ref[(0, i)], ref[(1, i)]) for i in range(len(DATA)))  # the epoch is in the key
    return ref


@pytest.mark.parametrize("kwargs", [
    {"batch_size": 4, "num_workers": 1},
    {"batch_size": 5, "num_workers": 4},
    {"batch_size": 7, "num_workers": 4, "item_concurrency": 3},
    {"batch_size": 3, "num_workers": 2, "worker_method": "process", "multiprocessing_context": "fork"},
    {"batch_size": 4, "rank": 0, "world_size": 1, "in_order": False, "num_workers": 3},
], ids=["1-thread", "4-threads", "4-threads-items", "2-processes", "out-of-order"])
def test_the_same_augmentations_under_any_workers_and_batch_size(reference, kwargs):
    assert same(epochs(**kwargs), reference)


def test_simulated_ranks_draw_what_one_rank_draws(reference):
    ranks = [epochs(batch_size=2, rank=r, world_size=3, num_workers=2) for r in range(3)]
    assert same({k: v for r in ranks for k, v in r.items()}, reference)


def test_a_resume_with_another_topology_draws_the_same(reference):
    first = loader(batch_size=5, num_workers=4, worker_method="thread")
    it = iter(first)
    head = collect([next(it) for _ in range(3)], 0, {})
    state = first.state_dict()
    first.close()
    resumed = loader(batch_size=3, num_workers=2, worker_method="process", multiprocessing_context="fork")
    resumed.load_state_dict(state)
    rest = collect(resumed, 0, {})
    collect(resumed, 1, rest)
    resumed.close()
    assert same(head | rest, reference)


def test_two_real_gloo_ranks_draw_what_one_rank_draws(reference, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ranks.pt"
    mp.spawn(rank_job, args=(2, port, str(out)), nprocs=2, join=True)
    gathered = torch.load(out)
    assert all(gathered) and not gathered[0].keys() & gathered[1].keys()
    assert same(gathered[0] | gathered[1], reference)
