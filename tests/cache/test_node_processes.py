"""``node_processes``: the one count of a node's processes reading a cache (the node cache's prefetch quarter, the
reader threads and a shard window's ceiling are divided by it), and ``reading_processes``: a loader worker's
``num_workers`` in each local rank. The end-to-end check (two gloo ranks, one node cache on moto) is
``tests/remote/test_node_cache_prefetch_split.py``."""

from __future__ import annotations

import pytest
import torch

from torch_drt._cpu_budget import node_processes, reading_processes


@pytest.mark.parametrize(
    ("per_rank", "world", "local", "expected"),
    [
        (0, 1, None, 1),  # no loading process: the process reads for itself
        (3, 1, None, 3),
        (3, 1, "2", 3),  # not distributed: LOCAL_WORLD_SIZE is not looked at
        (0, 2, "2", 2),  # torchrun, two local ranks reading in their own processes
        (2, 2, "2", 4),  # ... with two loading processes each
        (2, 8, "4", 8),  # two nodes of four ranks: only this node's ranks count
        (4, 8, None, 32),  # no LOCAL_WORLD_SIZE: every rank is taken to be here
    ],
)
def test_the_nodes_processes_are_the_local_ranks_times_each_ranks(monkeypatch, per_rank, world, local, expected):
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert node_processes(per_rank, world) == expected


def test_a_negative_count_or_a_local_world_outside_the_world_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="per_rank=-1"):
        node_processes(-1, 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE=3"):
        node_processes(1, 2)


class _Probe(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return reading_processes(2)


def test_a_process_worker_counts_its_loaders_workers_any_other_process_itself(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert reading_processes() == 1  # no process group: one rank
    assert reading_processes(2) == 2
    loader = torch.utils.data.DataLoader(_Probe(), num_workers=3, batch_size=None, multiprocessing_context="fork")
    assert list(loader) == [6, 6, 6, 6]  # three workers in each of two local ranks
