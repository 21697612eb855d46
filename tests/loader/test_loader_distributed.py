"""Real ranks (torch.multiprocessing + gloo): coverage, equal steps, resume at another world size."""

from __future__ import annotations

import json
import socket

import pytest
import torch.multiprocessing as mp
from dist_job import N, run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(tmp_path, world_size, stop_after=None, resume=None, name="out"):
    out = tmp_path / f"{name}.json"
    # forked ranks (spawned interpreters cost seconds each to start), real processes with their own gloo group
    mp.start_processes(run, args=(world_size, free_port(), str(out), stop_after, resume), nprocs=world_size, join=True,
                       start_method="fork")
    return json.loads(out.read_text())


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_cover_the_epoch_once_with_equal_steps(tmp_path, world_size):
    ranks = job(tmp_path, world_size)
    seen = [x for r in ranks for x in r["seen"]]
    assert sorted(seen) == list(range(N))
    assert len({r["steps"] for r in ranks}) == 1
    assert all(r["state"]["epoch"] == 1 and r["state"]["observation_offset"] == 0 for r in ranks)


def test_checkpoint_at_two_ranks_resumes_at_three(tmp_path):
    first = job(tmp_path, 2, stop_after=4, name="first")
    states = {json.dumps(r["state"], sort_keys=True) for r in first}
    assert len(states) == 1  # every rank holds the same global position
    state = first[0]["state"]
    assert state["observation_offset"] == 4 * 3 * 2
    (tmp_path / "state.json").write_text(json.dumps(state))
    second = job(tmp_path, 3, resume=str(tmp_path / "state.json"), name="second")
    seen = [x for r in first + second for x in r["seen"]]
    assert sorted(seen) == list(range(N))  # nothing skipped, nothing repeated
    assert len({r["steps"] for r in second}) == 1


@pytest.mark.parametrize(("drop_last", "batches", "samples"), [(False, 11, 334), (True, 10, 320)])
def test_cache_loader_budget_on_three_ranks(tmp_path, runtime, drop_last, batches, samples):
    from conftest import QUIET, ListSource
    from dist_job import cache_budget

    (res,) = runtime.write_cache([ListSource("d", 50)], tmp_path, writer_config=QUIET)
    out = tmp_path / "budget.json"
    mp.start_processes(cache_budget, args=(3, free_port(), str(out), str(res.path), drop_last), nprocs=3, join=True,
                       start_method="fork")
    ranks = json.loads(out.read_text())
    assert all(len(r["sizes"]) == batches and sum(r["sizes"]) == samples for r in ranks)
    assert len(ranks[0]["warned"]) == 1 and ranks[1]["warned"] == ranks[2]["warned"] == []
    assert len({r["seed"] for r in ranks}) == 1  # "random" is drawn once and shared


def test_ranks_seeded_differently_agree_on_the_shuffled_order_without_a_seed(tmp_path):
    """The loader's seed, drawn from each rank's generator, is rank zero's on every rank of the group: ranks whose
    generators differ (``torch.manual_seed(base + rank)``) still split one order, nothing read twice or missed."""
    from dist_job import unseeded

    out = tmp_path / "unseeded.json"
    mp.start_processes(unseeded, args=(2, free_port(), str(out)), nprocs=2, join=True, start_method="fork")
    ranks = json.loads(out.read_text())
    for name in ("group", "explicit"):
        assert len({r[name]["seed"] for r in ranks}) == 1, name
        for key in ("seen", "next"):  # two epochs
            assert sorted(x for r in ranks for x in r[name][key]) == list(range(N)), (name, key)
