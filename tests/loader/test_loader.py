"""torch_drt.StatefulDataLoader: partitioning, order, resume, errors, threads and processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from torch_drt import StatefulDataLoader


class Squares:
    """Item i is i*i; counts __getitems__ calls."""

    def __init__(self, n: int, fail: set[int] = frozenset()) -> None:
        self.n = n
        self.fail = set(fail)
        self.getitems_calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.fail:
            raise KeyError(f"bad item {i}")
        return i * i


class Batched(Squares):
    def __getitems__(self, indices: list[int]) -> list[int]:
        self.getitems_calls += 1
        return [self[i] for i in indices]


def ident(i: int, x: int) -> int:
    return x


def batches(loader) -> list:
    return [list(b) for b in loader]


def wait_until(condition, limit: float = 60.0) -> None:
    """Wait for ``condition()`` (a bound against a hang, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def R(n: int) -> list[int]:
    return list(range(n))


def test_is_a_torchdata_stateful_dataloader():
    assert isinstance(StatefulDataLoader(R(4)), TorchdataLoader)


def test_rank_partition_and_drop_last():
    got = [batches(StatefulDataLoader(R(10), batch_size=2, world_size=2, rank=r, drop_last=True, collate_fn=list))
           for r in range(2)]
    assert got == [[[0, 2], [4, 6]], [[1, 3], [5, 7]]]


def test_padding_gives_equal_steps_and_empty_collate():
    seen = []

    def collate(items):
        seen.append(list(items))
        return items

    got = [batches(StatefulDataLoader(R(10), batch_size=2, world_size=4, rank=r, collate_fn=collate)) for r in range(4)]
    assert got[2] == [[2, 6], []]
    assert [len(g) for g in got] == [2, 2, 2, 2]
    assert sorted(x for g in got for b in g for x in b) == R(10)
    assert [] in seen
    short = [b.tolist() for b in StatefulDataLoader(R(3), batch_size=2)]  # default collate, short last batch
    assert short == [[0, 1], [2]]


def test_default_collate_of_empty_batch_is_an_empty_list():
    loader = StatefulDataLoader(R(3), batch_size=2, world_size=4, rank=3)
    assert [b.tolist() if isinstance(b, torch.Tensor) else b for b in loader] == [[]]


@pytest.mark.parametrize(("world", "bs", "expected"), [
    (1, 3, [[8, 9, 10], [11, 12, 13], [14, 15, 16], [17, 18, 19]]),
    (3, 2, [[8, 11], [14, 17]]),
])
def test_resume_under_another_batch_size_and_world_size(world, bs, expected):
    first = StatefulDataLoader(R(20), batch_size=2, world_size=2, rank=0, drop_last=True, collate_fn=list)
    it = iter(first)
    assert [next(it), next(it)] == [[0, 2], [4, 6]]
    state = first.state_dict()
    assert state["observation_offset"] == 8 and json.loads(json.dumps(state)) == state
    resumed = StatefulDataLoader(R(20), batch_size=bs, world_size=world, rank=0, drop_last=True, collate_fn=list)
    resumed.load_state_dict(state)
    it = iter(resumed)
    assert len(it) == len(expected)
    assert batches(it) == expected


@pytest.mark.parametrize(("before", "after"), [
    ({"num_workers": 0}, {"num_workers": 3, "worker_method": "thread"}),
    ({"num_workers": 2}, {"num_workers": 0}),
    ({"num_workers": 2, "worker_method": "thread"}, {"num_workers": 2, "multiprocessing_context": "spawn"}),
    ({"num_workers": 1, "worker_method": "process", "multiprocessing_context": "fork"}, {"num_workers": 4}),
])
def test_resume_under_other_workers_matches_an_uninterrupted_run(before, after):
    common = dict(batch_size=3, shuffle=True, seed=5, collate_fn=list)
    reference = StatefulDataLoader(R(40), **common)
    full = batches(reference) + batches(reference)
    loader = StatefulDataLoader(R(40), **common, **before)
    it = iter(loader)
    head = [next(it) for _ in range(4)]  # workers have prefetched beyond these
    state = loader.state_dict()
    assert state["observation_offset"] == 12
    resumed = StatefulDataLoader(R(40), batch_size=3, shuffle=True, seed=5, collate_fn=list, **after)
    resumed.load_state_dict(state)
    rest = batches(resumed) + batches(resumed)  # the rest of epoch 0, then epoch 1
    assert head + rest == full[: len(head) + len(rest)]
    assert len(head + rest) == 2 * 14


def test_shuffle_is_one_permutation_for_every_batch_and_world_size():
    single = [x for b in StatefulDataLoader(R(24), batch_size=4, shuffle=True, seed=9, collate_fn=list) for x in b]
    assert sorted(single) == R(24) and single != R(24)
    per_rank = [batches(StatefulDataLoader(R(24), batch_size=2, world_size=3, rank=r, shuffle=True, seed=9,
                                           collate_fn=list)) for r in range(3)]
    interleaved = [per_rank[r][b][k] for b in range(4) for k in range(2) for r in range(3)]
    assert interleaved == single


def test_new_permutation_each_epoch_and_seed_reproduces():
    loader = StatefulDataLoader(R(30), batch_size=30, shuffle=True, seed=1, collate_fn=list)
    e0, e1 = batches(loader), batches(loader)
    assert e0 != e1 and sorted(e0[0]) == sorted(e1[0]) == R(30)
    again = StatefulDataLoader(R(30), batch_size=30, shuffle=True, seed=1, collate_fn=list)
    assert [batches(again), batches(again)] == [e0, e1]
    assert batches(StatefulDataLoader(R(30), batch_size=30, shuffle=True, seed=2, collate_fn=list)) != e0


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 3}, {"num_workers": 2, "item_concurrency": 4},
                                    {"num_workers": 2, "worker_method": "process"}])
def test_order_len_and_iterator_len(kwargs):
    loader = StatefulDataLoader(Squares(23), batch_size=4, collate_fn=list, **kwargs)
    assert len(loader) == 6
    it = iter(loader)
    assert len(it) == 6
    first = next(it)
    assert len(it) == 5
    assert [first, *it] == [[i * i for i in range(k, min(k + 4, 23))] for k in range(0, 23, 4)]
    assert len(it) == 0


def test_getitems_is_used_for_whole_batches():
    ds = Batched(10)
    assert batches(StatefulDataLoader(ds, batch_size=5, collate_fn=list)) == [[i * i for i in range(5)],
                                                                              [i * i for i in range(5, 10)]]
    assert ds.getitems_calls == 2


def test_transform_and_return_indices():
    loader = StatefulDataLoader(R(6), batch_size=3, shuffle=True, seed=0, collate_fn=list,
                                transform=lambda i, x: (i, x * 10), return_indices=True, num_workers=2)
    for batch, indices in loader:
        assert [i for i, _ in batch] == indices and [x for _, x in batch] == [10 * i for i in indices]


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2},
                                    {"num_workers": 2, "item_concurrency": 3, "worker_method": "thread"},
                                    {"num_workers": 2, "worker_method": "process", "multiprocessing_context": "spawn"}])
def test_errors_keep_their_type_and_the_next_batch_follows(kwargs):
    loader = StatefulDataLoader(Squares(12, fail={5}), batch_size=2, collate_fn=list, **kwargs)
    it = iter(loader)
    assert next(it) == [0, 1] and next(it) == [4, 9]
    with pytest.raises(KeyError, match="bad item 5"):
        next(it)
    assert next(it) == [36, 49]
    assert loader.state_dict()["observation_offset"] == 8


def test_transform_and_collate_errors():
    def transform(i, x):
        if i == 3:
            raise ValueError("no 3")
        return x

    def collate(items):
        if 0 in items:
            raise ZeroDivisionError("collate says no")
        return items

    it = iter(StatefulDataLoader(R(6), batch_size=2, transform=transform, collate_fn=collate, num_workers=2))
    with pytest.raises(ZeroDivisionError, match="collate says no"):
        next(it)
    with pytest.raises(ValueError, match="no 3"):
        next(it)
    assert next(it) == [4, 5]


class Gate:
    """Items >= ``open_from`` wait on an event."""

    def __init__(self, n: int, open_from: int) -> None:
        self.n, self.open_from = n, open_from
        self.event = threading.Event()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i >= self.open_from:
            self.event.wait(30)
        return i


def test_break_returns_at_once_and_second_thread_gets_runtime_error():
    ds = Gate(100, open_from=4)
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=2, collate_fn=list, worker_method="thread")
    it = iter(loader)
    assert next(it) == [0, 1]
    errors = []
    waiter = threading.Thread(target=lambda: errors.append(next(it)))
    next(it)  # [2, 3] is ready
    waiter.start()
    wait_until(lambda: not it._baton)  # the waiter is inside next(), blocked on the gated batch
    with pytest.raises(RuntimeError, match="another thread is advancing"):
        next(it)
    ds.event.set()
    waiter.join(10)
    assert errors == [[4, 5]]
    ds.event.clear()
    for _ in loader:  # breaking out of a loop whose next batches are blocked returns without waiting
        break
    ds.event.set()
    loader.close()


@pytest.mark.parametrize("workers", [0, 1])  # 0: the batch loads in the calling thread, which Ctrl-C interrupts
def test_ctrl_c_interrupts_a_waiting_next_and_loses_nothing(workers, sigint_raises):
    ds = Gate(10, open_from=2)
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=workers, collate_fn=list, worker_method="thread")
    it = iter(loader)
    assert next(it) == [0, 1]
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    timer.join()
    assert loader.state_dict()["observation_offset"] == 2
    ds.event.set()
    assert next(it) == [2, 3]
    assert loader.state_dict()["observation_offset"] == 4


def test_timeout_reports_a_stuck_batch():
    ds = Gate(4, open_from=0)
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=1, timeout=0.3, collate_fn=list)
    with pytest.raises(TimeoutError, match=r"timeout=0\.3"):
        next(iter(loader))
    ds.event.set()
    loader.close()


class Dies(Squares):
    def __getitem__(self, i):
        if i == 2:
            os._exit(3)
        return i


def test_dead_process_worker_is_reported():
    from concurrent.futures.process import BrokenProcessPool

    loader = StatefulDataLoader(Dies(6), batch_size=2, num_workers=1, worker_method="process",
                                multiprocessing_context="fork", collate_fn=list)
    it = iter(loader)
    assert next(it) == [0, 1]
    with pytest.raises(BrokenProcessPool, match="terminated abruptly"):
        next(it)
    loader.close()


class Recording:
    """Items of ``range(n)`` that record which indices were fetched."""

    def __init__(self, n: int) -> None:
        self.n, self.fetched = n, set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.fetched.add(i)
        return i


def test_state_counts_delivered_batches_only_and_epochs_roll_over():
    ds = Recording(10)
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=2, prefetch_depth=4, collate_fn=list,
                                worker_method="thread")
    it = iter(loader)
    next(it)
    wait_until(lambda: len(ds.fetched) >= 6)  # the workers have read ahead of what was delivered
    assert loader.state_dict()["observation_offset"] == 2 and loader.state_dict()["epoch"] == 0
    list(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["observation_offset"]) == (1, 0)
    resumed = StatefulDataLoader(R(10), batch_size=2, collate_fn=list)
    resumed.load_state_dict(loader.state_dict())
    assert len(batches(resumed)) == 5


def test_settings_mismatch_warns_and_random_seed_adopts_the_checkpoint():
    a = StatefulDataLoader(R(10), batch_size=2, shuffle=True, seed=3, collate_fn=list)
    it = iter(a)
    next(it)
    state = a.state_dict()
    rest = list(it)
    b = StatefulDataLoader(R(10), batch_size=2, shuffle=True, collate_fn=list)  # seed drawn at random
    b.load_state_dict(state)
    assert batches(b) == rest
    c = StatefulDataLoader(R(10), batch_size=2, shuffle=True, seed=4, collate_fn=list)
    with pytest.warns(UserWarning, match="shuffle_seed: checkpoint 3, loader 4"):
        c.load_state_dict(state)
    d = StatefulDataLoader(R(10), batch_size=2, shuffle=True, seed=3, collate_fn=list)
    it2 = iter(d)
    next(it2), next(it2), next(it2)
    d.load_state_dict(state)  # as torchdata's: the running iterator is dropped, the state applies at the next iter()
    with pytest.raises(RuntimeError, match="superseded"):
        next(it2)
    assert batches(d) == rest
    e = StatefulDataLoader(R(10), batch_size=2, collate_fn=list)
    it3 = iter(e)
    first = next(it3)
    with pytest.raises(ValueError):  # a state that does not describe the loader leaves a running iterator alone
        e.load_state_dict({"version": 999})
    assert [first, *it3] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"batch_size": 0}, ValueError, "batch_size=0 must be an int > 0"),
    ({"prefetch_depth": 0}, ValueError, "prefetch_depth=0 must be"),
    ({"item_concurrency": 0}, ValueError, "item_concurrency=0 must be"),
    ({"seed": -3}, ValueError, r"seed=-3 must be an int in \[0, 2\*\*64\)"),
    ({"seed": True}, ValueError, "seed=True must be an int"),
    ({"num_workers": 1 << 32}, ValueError, r"num_workers=4294967296 must be an int in \[0, 1024\]"),
    ({"timeout": float("nan")}, ValueError, "timeout=nan must be a finite number"),
    ({"shuffle": True, "sampler": [0, 1]}, ValueError, "sampler option is mutually exclusive with shuffle"),
    ({"rank": 2, "world_size": 2}, ValueError, r"rank=2 must be in \[0, world_size=2\)"),
    ({"batch_size": 4, "world_size": 2, "rank": 0, "drop_last": True}, ValueError, "fewer than one global batch"),
    ({"worker_method": "fiber"}, ValueError, "worker_method='fiber'"),
    ({"num_workers": 1, "worker_method": "process", "multiprocessing_context": "spawn", "transform": lambda i, x: x},
     TypeError, "picklable"),
    ({"device": "cuda"}, ValueError, "CUDA is not available"),
])
def test_validation(kwargs, error, message):
    if kwargs.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(error, match=message):
        StatefulDataLoader(R(5), **kwargs)


def test_sampler_is_read_each_epoch_and_validated():
    loader = StatefulDataLoader(R(10), batch_size=2, sampler=[9, 0, 3], collate_fn=list)
    assert batches(loader) == [[9, 0], [3]] and len(loader) == 2
    with pytest.raises(ValueError, match="sampler item 1 is 10"):
        next(iter(StatefulDataLoader(R(10), sampler=[1, 10])))  # read lazily
    with pytest.raises(TypeError, match="sampler must be an iterable"):
        StatefulDataLoader(R(10), sampler=5)


def test_pin_memory_on_cpu_is_a_documented_no_op():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.warns(UserWarning, match="pin_memory=True has no effect"):
        loader = StatefulDataLoader(R(4), batch_size=2, pin_memory=True, device="cpu")
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    assert not loader.pin_memory


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_pinning_at_0_workers_happens_in_the_calling_thread_as_in_torch(dataset, monkeypatch):
    """torch's loader pins at 0 workers too. No CUDA here: pinning is allowed by hand and its function replaced by a
    marker (the transport pins process workers' batches; nothing pinned them at 0 workers)."""
    import torch_drt.loader._fetch as fetch
    import torch_drt.loader._item_fetch as item_fetch
    import torch_drt.loader.dataloader as dataloader

    def mark(batch):
        return ("pinned", batch)

    monkeypatch.setattr(dataloader, "resolve_pin_memory", lambda pin: pin)
    monkeypatch.setattr(fetch, "pin_batch", mark)
    monkeypatch.setattr(item_fetch, "pin_batch", mark)
    data = R(4) if dataset == "map" else _Stream()
    for kwargs in ({}, {"worker_method": "thread"}):
        loader = StatefulDataLoader(data, batch_size=2, collate_fn=list, pin_memory=True, **kwargs)
        assert list(loader) == [("pinned", [0, 1]), ("pinned", [2, 3])], kwargs


def test_workers_persist_across_epochs():
    seen: list[list[threading.Thread]] = [[], []]
    epoch = [0]

    def record(i, x):
        seen[epoch[0]].append(threading.current_thread())  # the thread objects themselves: names repeat per pool
        time.sleep(0.002)  # slow enough to stay on the workers (cheap batches are mapped inline)
        return x

    loader = StatefulDataLoader(R(40), batch_size=2, num_workers=2, collate_fn=list, transform=record,
                                persistent_workers=True, worker_method="thread")
    batches(loader)
    epoch[0] = 1
    batches(loader)
    workers = [{t for t in threads if t is not threading.main_thread()} for threads in seen]
    assert workers[0] and workers[1]
    assert len(workers[0] | workers[1]) <= 2  # the same two threads served both epochs
