"""Issue 12 items 1 and 3: worker_init_fn runs once per worker; get_worker_info() in thread and process workers;
the global random generators of process workers seeded per worker as torch seeds them."""

from __future__ import annotations

import os
import random
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import get_worker_info as torch_worker_info

from torch_drt import StatefulDataLoader
from torch_drt.loader import get_worker_info

PROCESS = {"worker_method": "process", "multiprocessing_context": "fork"}
STARTED: dict = {}  # in each worker process: what its worker_init_fn saw


def record_start(worker_id: int) -> None:
    info = torch_worker_info()
    STARTED.update(
        id=worker_id, info=(info.id, info.num_workers, info.seed, type(info.dataset).__name__),
        draws=(float(torch.rand(())), float(np.random.rand()), random.random()),
    )


class Reports:
    """Each item reports what its process worker's worker_init_fn saw."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        return dict(STARTED, pid=os.getpid(), index=i)


def process_starts(seed: int, **kwargs) -> dict[int, dict]:
    loader = StatefulDataLoader(Reports(), batch_size=1, num_workers=2, seed=seed, worker_init_fn=record_start,
                                collate_fn=lambda items: items[0], **PROCESS, **kwargs)
    by_worker = {item["id"]: item for item in loader}
    loader.close()
    return by_worker


def test_process_workers_get_torchs_worker_info_and_seeded_global_generators():
    first = process_starts(seed=3)
    assert sorted(first) == [0, 1]
    for w, item in first.items():
        wid, count, _, dataset = item["info"]
        assert (wid, count, dataset) == (w, 2, "Reports")
    assert first[1]["info"][2] == first[0]["info"][2] + 1  # base_seed + worker_id, torch's rule
    assert len({d for item in first.values() for d in item["draws"]}) == 6  # distinct per worker and generator
    again = process_starts(seed=3)
    assert {w: i["draws"] for w, i in again.items()} == {w: i["draws"] for w, i in first.items()}  # reproducible
    other = process_starts(seed=4)
    assert {w: i["draws"] for w, i in other.items()} != {w: i["draws"] for w, i in first.items()}


def test_the_main_process_generators_move_only_as_torchs_loader_moves_them():
    """Seeding the workers leaves the main process's generators alone; iter() draws torch's base seed there, as
    torch's loader does (one draw), so the script's later draws are torch's."""
    torch.manual_seed(0)
    list(torch.utils.data.DataLoader(list(range(4))))
    expected = torch.rand(3)
    torch.manual_seed(0)
    process_starts(seed=3)
    assert torch.equal(torch.rand(3), expected)


def wait_for(condition, seconds: float = 10) -> None:
    """Wait until ``condition()`` holds (thread workers start asynchronously), at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


class ThreadReports:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list = []

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> tuple:
        info = get_worker_info()
        return None if info is None else info.id, threading.get_ident(), torch_worker_info()


def test_thread_workers_get_their_own_worker_info():
    dataset = ThreadReports()

    def start(worker_id: int) -> None:
        info = get_worker_info()
        rng = info.rng
        with dataset.lock:
            dataset.starts.append((worker_id, info.id, info.num_workers, info.seed, info.dataset is dataset,
                                   info.worker_method, float(torch.rand((), generator=rng.torch_generator)),
                                   rng.random_generator.random(), float(rng.numpy_generator.random())))

    loader = StatefulDataLoader(dataset, batch_size=2, num_workers=3, seed=9, worker_init_fn=start, collate_fn=list,
                                persistent_workers=True, worker_method="thread")
    items = [x for batch in loader for x in batch]
    wait_for(lambda: len(dataset.starts) == 3)  # a worker that took no batch may still be starting
    assert {wid for wid, _, _ in items} <= {0, 1, 2}
    assert all(torch_info is None for _, _, torch_info in items)  # torch's is per process: None in threads
    assert len({tid for _, tid, _ in items}) <= 3
    starts = sorted(dataset.starts)
    assert [s[:3] for s in starts] == [(w, w, 3) for w in range(3)]
    assert [s[3] - starts[0][3] for s in starts] == [0, 1, 2]
    assert all(s[4] and s[5] == "thread" for s in starts)
    assert len({x for s in starts for x in s[6:]}) == 9  # each thread's own generators
    first_draws = [s[6:] for s in starts]
    dataset.starts.clear()
    again = StatefulDataLoader(dataset, batch_size=2, num_workers=3, seed=9, worker_init_fn=start, collate_fn=list,
                           worker_method="thread")
    list(again)
    wait_for(lambda: len(dataset.starts) == 3)
    assert [s[6:] for s in sorted(dataset.starts)] == first_draws  # reproducible from the loader's seed


def test_no_worker_info_without_workers():
    loader = StatefulDataLoader(ThreadReports(), batch_size=4, collate_fn=list)
    assert get_worker_info() is None
    assert all(x[0] is None and x[2] is None for batch in loader for x in batch)


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_init_fn_runs_once_per_worker_thread(persistent):
    calls: list[int] = []
    lock = threading.Lock()

    def init(worker_id: int) -> None:
        with lock:
            calls.append(worker_id)

    def slow(i, x):
        time.sleep(0.001)
        return x

    loader = StatefulDataLoader(list(range(20)), batch_size=2, num_workers=2, worker_init_fn=init, transform=slow,
                                persistent_workers=persistent, collate_fn=list, worker_method="thread")
    for _ in range(3):
        assert [x for b in loader for x in b] == list(range(20))
    wait_for(lambda: len(calls) >= (2 if persistent else 6))  # a thread that took no batch may still be starting
    assert sorted(calls) == ([0, 1] if persistent else [0, 0, 0, 1, 1, 1])


def write_pid(worker_id: int) -> None:
    with open(os.path.join(os.environ["DROPIN_INIT_DIR"], f"{os.getpid()}-{worker_id}"), "w"):
        pass


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_init_fn_runs_once_per_worker_process(persistent, tmp_path, monkeypatch):
    monkeypatch.setenv("DROPIN_INIT_DIR", str(tmp_path))
    loader = StatefulDataLoader(list(range(12)), batch_size=2, num_workers=2, worker_init_fn=write_pid,
                                persistent_workers=persistent, collate_fn=list, **PROCESS)
    pids = []
    for _ in range(3):
        assert [x for b in loader for x in b] == list(range(12))
        pids.append(set(loader._mode.mapper.worker_pids()))
    loader.close()
    starts = [name.split("-") for name in os.listdir(tmp_path)]
    assert sorted(int(w) for _, w in starts) == ([0, 1] if persistent else [0, 0, 0, 1, 1, 1])
    assert len({pid for pid, _ in starts}) == (2 if persistent else 6)  # False: new processes every epoch


def fails(worker_id: int) -> None:
    raise OSError(f"worker {worker_id} cannot open its shard")


@pytest.mark.parametrize("kwargs", [{"worker_method": "thread"}, PROCESS])
def test_a_failing_worker_init_fn_fails_the_batches_with_its_error(kwargs):
    loader = StatefulDataLoader(list(range(4)), batch_size=2, num_workers=1, worker_init_fn=fails, **kwargs)
    with pytest.raises(OSError, match="worker 0 cannot open its shard"):
        next(iter(loader))
    loader.close()


def test_a_drawn_seed_adopts_the_checkpoints_for_the_loader_and_its_workers():
    """A loader without a seed takes the checkpoint's (its shuffle order continues): ``loader.seed`` and the seeds its
    workers start with are the checkpoint's too, as the uninterrupted loader's were."""

    def run(loader: StatefulDataLoader, state: dict | None = None) -> tuple[list, set[int]]:
        seeds: set[int] = set()
        loader.worker_init_fn = lambda worker_id: seeds.add(get_worker_info().seed)
        if state is not None:
            loader.load_state_dict(state)
        return list(loader), seeds

    def make(**kwargs) -> StatefulDataLoader:
        return StatefulDataLoader(list(range(12)), batch_size=2, shuffle=True, collate_fn=list, num_workers=2,
                                  worker_method="thread", **kwargs)

    first = make(seed=3)
    it = iter(first)
    next(it)
    state = first.state_dict()
    expected = list(it)
    resumed = make()  # seed drawn at random
    batches, seeds = run(resumed, state)
    assert resumed.seed == 3 and batches == expected
    assert seeds == run(make(seed=3))[1]
