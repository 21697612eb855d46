"""Issue 12 item 1: torch's DataLoader signature, every argument honoured with torch's meaning or refused."""

from __future__ import annotations

import inspect
import threading
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from torch_drt import StatefulDataLoader

FORK = {"worker_method": "process", "multiprocessing_context": "fork"}
THREADS = {"worker_method": "thread"}


def params(cls) -> list[inspect.Parameter]:
    return list(inspect.signature(cls.__init__).parameters.values())[1:]


@pytest.mark.parametrize("reference", [DataLoader, TorchdataLoader], ids=["torch", "torchdata"])
def test_torchs_arguments_in_torchs_order_then_ours_keyword_only(reference):
    ours, theirs = params(StatefulDataLoader), params(reference)
    assert [(p.name, p.kind) for p in ours[: len(theirs)]] == [(p.name, p.kind) for p in theirs]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ours[len(theirs):])
    defaults = {p.name: p.default for p in theirs}
    assert {p.name: p.default for p in ours[: len(theirs)]} == defaults


def test_positional_arguments_mean_what_they_mean_in_torch():
    dataset = [torch.tensor(i) for i in range(10)]
    ours = StatefulDataLoader(dataset, 4, False, None, None, 0, list, False, True)  # ..., pin_memory, drop_last
    theirs = DataLoader(dataset, 4, False, None, None, 0, list, False, True)
    assert list(ours) == list(theirs) == [dataset[0:4], dataset[4:8]]


def test_prefetch_factor_is_batches_ahead_per_worker():
    loader = StatefulDataLoader(list(range(40)), batch_size=2, num_workers=3, prefetch_factor=4)
    assert loader._mode.mapper.in_flight == 12
    assert [x for b in loader for x in b.tolist()] == list(range(40))



@pytest.mark.parametrize("workers", [0, 1, 3])
def test_default_batches_ahead_are_torchs_with_process_workers(workers):
    """torch's DataLoader: ``prefetch_factor`` None without workers, else 2 (2 batches ahead per worker)."""
    theirs = DataLoader(list(range(4)), num_workers=workers)
    ours = StatefulDataLoader(list(range(4)), num_workers=workers)
    assert ours.prefetch_factor == theirs.prefetch_factor
    if workers:
        assert ours._mode.mapper.in_flight == workers * theirs.prefetch_factor
        assert "prefetch_factor" not in repr(ours)  # the default
    threads = StatefulDataLoader(list(range(4)), num_workers=max(workers, 1), worker_method="thread")
    assert threads.prefetch_factor is None and threads._mode.mapper.in_flight == threads.num_workers + 2  # opt-in
    depth = StatefulDataLoader(list(range(4)), num_workers=3, prefetch_depth=1)  # torch_drt's own setting
    assert depth.prefetch_factor is None and depth._mode.mapper.in_flight == 4
    tuned = StatefulDataLoader(list(range(4)), num_workers="auto", multiprocessing_context="fork")
    assert tuned.prefetch_factor is None  # the search tunes batches ahead as prefetch_depth


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"prefetch_factor": 2}, "prefetch_factor option could only be specified in multiprocessing"),
    ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
    ({"multiprocessing_context": "spawn"}, "multiprocessing_context can only be used with multi-process loading"),
    ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler option is mutually exclusive"),
    ({"batch_sampler": [[0]], "drop_last": True}, "batch_sampler option is mutually exclusive"),
    ({"batch_size": None, "drop_last": True}, "batch_size=None option disables auto-batching"),
    ({"timeout": -1}, "timeout"),
    ({"multiprocessing_context": "threads", "num_workers": 1}, "should specify a valid start method"),
])
def test_invalid_combinations_are_refused_as_torch_refuses_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(list(range(4)), **kwargs)
    with pytest.raises(ValueError, match=message):
        StatefulDataLoader(list(range(4)), **kwargs)


def test_prefetch_factor_and_prefetch_depth_are_one_setting():
    with pytest.raises(ValueError, match="not both"):
        StatefulDataLoader(list(range(4)), num_workers=2, prefetch_factor=2, prefetch_depth=3)


def thread_sets(persistent: bool) -> list[set]:
    seen: list[set] = []

    def record(i: int, x: int) -> int:
        seen[-1].add(threading.current_thread())
        return x

    loader = StatefulDataLoader(list(range(24)), batch_size=2, num_workers=2, transform=record, worker_method="thread",
                                persistent_workers=persistent, worker_init_fn=lambda w: None, collate_fn=list)
    for _ in range(2):
        seen.append(set())
        assert [x for b in loader for x in b] == list(range(24))
    return seen


def test_persistent_workers_false_starts_new_workers_every_epoch():
    first, second = thread_sets(persistent=False)
    assert first and second and not first & second
    first, second = thread_sets(persistent=True)
    assert len(first | second) <= 2  # the same two threads


def test_the_workers_see_the_dataset_as_the_main_process_left_it_each_epoch():
    class Epochs:  # the set_epoch pattern: only new workers see the new epoch
        epoch = 0

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            return self.epoch * 10 + i

    dataset = Epochs()
    loader = StatefulDataLoader(dataset, batch_size=2, num_workers=2, collate_fn=list, **FORK)
    seen = []
    for epoch in range(2):
        dataset.epoch = epoch
        seen.append([x for b in loader for x in b])
    assert seen == [[0, 1, 2, 3], [10, 11, 12, 13]]


def test_multiprocessing_context_selects_process_workers():
    loader = StatefulDataLoader(list(range(6)), batch_size=2, num_workers=2, multiprocessing_context="fork")
    assert loader.worker_method == "process"
    it = iter(loader)
    next(it)
    assert len(loader._mode.mapper.worker_pids()) == 2
    loader.close()


def test_generator_draws_the_seed_as_torch_draws_its_base_seed():
    def order(seed: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return [x for b in StatefulDataLoader(list(range(30)), batch_size=4, shuffle=True, generator=g) for x in b]

    assert order(1) == order(1) != order(2)
    assert sorted(order(1)) == list(range(30))


def test_batch_sampler_batches_are_the_samplers_lists():
    dataset = list(range(50))
    sampler = BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(3)), 7, drop_last=False)
    torch_epochs = [[b.tolist() for b in DataLoader(dataset, batch_sampler=sampler)] for _ in range(2)]
    sampler = BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(3)), 7, drop_last=False)
    loader = StatefulDataLoader(dataset, batch_sampler=sampler, num_workers=2)
    assert [[b.tolist() for b in loader] for _ in range(2)] == torch_epochs
    assert len(loader) == len(sampler) == 8
    assert loader.batch_size is None and loader.batch_sampler is sampler


def test_a_batch_sampler_resumes_after_the_delivered_lists():
    lists = [[3, 1], [0], [4, 5, 6], [2], [9, 8]]
    loader = StatefulDataLoader(list(range(10)), batch_sampler=lists, collate_fn=list)
    it = iter(loader)
    head = [next(it), next(it)]
    state = loader.state_dict()
    assert state["batches"] == 2 and state["items"] == 3
    resumed = StatefulDataLoader(list(range(10)), batch_sampler=lists, collate_fn=list, num_workers=2)
    resumed.load_state_dict(state)
    assert head + list(resumed) == lists
    with pytest.raises(ValueError, match="batch 1 of the batch_sampler is"):
        list(StatefulDataLoader(list(range(10)), batch_sampler=[[0], [10]], collate_fn=list))


@pytest.mark.parametrize("collate_fn", [None, lambda x: ("one", x)], ids=["default_convert", "custom"])
def test_batch_size_none_yields_items_alone(collate_fn):
    dataset = [np.arange(3) + i for i in range(4)]
    ours = list(StatefulDataLoader(dataset, batch_size=None, collate_fn=collate_fn))
    theirs = list(DataLoader(dataset, batch_size=None, collate_fn=collate_fn))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        assert type(a) is type(b) and repr(a) == repr(b)


def test_pin_memory_device_is_deprecated_as_in_torch():
    with pytest.warns(UserWarning, match="pin_memory_device is deprecated"):
        StatefulDataLoader(list(range(4)), pin_memory=True, pin_memory_device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StatefulDataLoader(list(range(4)), pin_memory_device="cuda")  # without pin_memory: nothing to say


class Overtaken:
    """Batch 0 (items 0, 1) waits until batch 1 (items 2, 3) was loaded: it can only be delivered out of order."""

    def __init__(self) -> None:
        self.loaded = threading.Event()

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == 0:
            assert self.loaded.wait(30), "batch 1 was never loaded"
        if i == 3:
            self.loaded.set()
        return i


class Held:
    """Item 0 waits until the test releases it: its batch can only come after another one was delivered."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == 0:
            assert self.released.wait(30), "item 0 was never released"
        return i


def overtaken() -> tuple[object, list[int], dict]:
    """An iterator whose first delivered batch overtook batch 0, that batch and the state after it."""
    dataset = Held()
    loader = StatefulDataLoader(dataset, batch_size=2, num_workers=2, in_order=False, collate_fn=list,
                                worker_init_fn=lambda w: None, worker_method="thread")
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    dataset.released.set()
    return it, first, state


def test_in_order_false_delivers_ready_batches_first_and_checkpoints_exactly():
    it, first, state = overtaken()
    assert first != [0, 1]  # batch 0 was still loading
    assert state["observation_offset"] == 0 and state["ahead"] == [first[0]]  # batch 0 undelivered, later one done
    rest = list(it)
    assert sorted(x for b in [first, *rest] for x in b) == list(range(12))
    resumed = StatefulDataLoader(list(range(12)), batch_size=2, collate_fn=list)
    resumed.load_state_dict(state)
    again = list(resumed)
    assert again[0] == [0, 1]
    assert sorted(x for b in [first, *again] for x in b) == list(range(12))  # each item once


def test_in_order_false_state_needs_the_same_global_batch():
    it, _, state = overtaken()
    list(it)
    other = StatefulDataLoader(list(range(12)), batch_size=3, collate_fn=list)
    with pytest.raises(ValueError, match="resumes only with batch_size"):
        other.load_state_dict(state)


def test_in_order_true_waits_for_the_oldest_batch():
    loader = StatefulDataLoader(Overtaken(), batch_size=2, num_workers=2, collate_fn=list,
                                worker_init_fn=lambda w: None, worker_method="thread")
    assert list(loader) == [[i, i + 1] for i in range(0, 12, 2)]


@pytest.mark.parametrize("kwargs", [THREADS, FORK], ids=["threads", "processes"])
def test_in_order_false_loads_every_item_once(kwargs):
    loader = StatefulDataLoader(list(range(40)), batch_size=3, num_workers=3, in_order=False, collate_fn=list,
                                **kwargs)
    for _ in range(2):
        assert sorted(x for b in loader for x in b) == list(range(40))
    loader.close()


def test_snapshot_every_n_steps_is_validated():
    with pytest.raises(ValueError, match="snapshot_every_n_steps=0"):
        StatefulDataLoader(list(range(4)), snapshot_every_n_steps=0)
