"""The inline fast path of a map-style loader (``OrderedMapper.inline_batches`` in ``torch_drt.nodes``; 0 workers,
or threads mapping cheap batches in the calling thread):
torch's DataLoader is the oracle for the batches; the general path (``OrderedMapper.next``, forced by switching the
fast path off) is the oracle for the states, the item generators, the statistics and the errors."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import DataLoader

import torch_drt.loader._map_mode as map_mode
from torch_drt import StatefulDataLoader
from torch_drt.loader._autotune import apply_setting
from torch_drt.loader._stats_recorder import StatsRecorder
from torch_drt.loader._tuner import Setting
from torch_drt.random import batch_scope, item_generator


class Ints:
    def __init__(self, n: int, fail: dict[int, type[BaseException]] | None = None) -> None:
        self.n, self.fail = n, dict(fail or {})

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        error = self.fail.pop(i, None)  # each failure happens once
        if error is not None:
            raise error(f"bad item {i}")
        return i


class Draws(Ints):
    def __getitem__(self, i: int) -> float:
        return torch.rand(1, generator=item_generator(i)).item()


class Many(Ints):
    def __getitems__(self, indices: list[int]) -> list[int]:
        return list(indices)


@pytest.fixture
def general(monkeypatch):
    """Loaders made from now on take the general path (mapper.next) for every batch."""
    monkeypatch.setattr(map_mode, "runs_inline", lambda *args: False)


def on_fast_path(it) -> bool:
    frame = getattr(getattr(it._next, "__self__", None), "gi_code", None)
    return frame is not None and frame.co_name == "inline_batches"


def test_a_loader_fetching_in_one_call_takes_the_fast_path_and_others_do_not():
    assert on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2)))
    # __getitems__, a transform: the batch is still one call in the calling thread
    assert on_fast_path(iter(StatefulDataLoader(Many(10), batch_size=2)))
    assert on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2, transform=lambda i, item: item)))
    # items fetched item_concurrency at a time on item threads: the general path
    assert not on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2, item_concurrency=2)))
    threads = {"num_workers": 1, "worker_method": "thread"}
    assert on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2, **threads)))  # adaptive: inline when cheap
    assert not on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2, worker_init_fn=abs, **threads)))
    assert not on_fast_path(iter(StatefulDataLoader(Ints(10), batch_size=2, num_workers=1, worker_method="process",
                                                    multiprocessing_context="fork")))


@pytest.mark.parametrize("n, batch_size, drop_last", [(103, 8, False), (103, 8, True), (64, 8, False), (5, 8, False),
                                                      (300, 1, False)])
@pytest.mark.parametrize("shuffled", [False, True])
def test_batches_and_indices_are_torchs(n, batch_size, drop_last, shuffled):
    sampler = torch.randperm(n, generator=torch.Generator().manual_seed(n)).tolist() if shuffled else None
    torch_loader = DataLoader(Ints(n), batch_size=batch_size, drop_last=drop_last, sampler=sampler, collate_fn=list)
    ours = StatefulDataLoader(Ints(n), batch_size=batch_size, drop_last=drop_last, sampler=sampler,
                              collate_fn=list, return_indices=True)
    assert on_fast_path(iter(ours))
    expected = [list(torch_loader) for _ in range(2)]
    got = [list(ours) for _ in range(2)]
    assert [[b for b, _ in epoch] for epoch in got] == expected
    assert [[i for _, i in epoch] for epoch in got] == expected  # the dataset returns its index


@pytest.mark.parametrize("dataset", [list(range(0, 206, 2)), tuple(range(0, 206, 2)), Ints(103)],
                         ids=["list", "tuple", "python-getitem"])
@pytest.mark.parametrize("workers", [0, 1])
def test_c_and_python_getitems_give_torchs_batches(dataset, workers):
    """A Python ``__getitem__`` is called from a comprehension, a C one through ``map()``: the same batches."""
    expected = list(DataLoader(dataset, batch_size=8, collate_fn=list))
    kwargs = {"num_workers": 1, "worker_method": "thread"} if workers else {}
    ours = StatefulDataLoader(dataset, batch_size=8, collate_fn=list, **kwargs)
    assert [list(ours) for _ in range(2)] == [expected] * 2


def states_and_batches(loader) -> tuple[list, list]:
    it = iter(loader)
    states, batches = [loader.state_dict()], []
    for batch in it:
        batches.append(batch)
        states.append(loader.state_dict())
    return states, batches


class Tuples(Ints):
    """A ``__getitems__`` that returns a tuple (a sequence: collate_fn receives it as it is)."""

    def __getitems__(self, indices: list[int]) -> tuple[int, ...]:
        return tuple([self[i] for i in indices])


def _tagged(index: int, item: int) -> tuple[int, int]:
    return index, item


@pytest.mark.parametrize("kwargs", [{}, {"shuffle": True}, {"drop_last": True, "shuffle": True},
                                    {"world_size": 2, "rank": 1}])
@pytest.mark.parametrize("fetch", ["getitem", "getitems", "transform"])
def test_states_and_resumes_match_the_general_path(kwargs, fetch, monkeypatch):
    def make():
        dataset = Tuples(530) if fetch == "getitems" else Ints(530)
        transform = _tagged if fetch == "transform" else None
        return StatefulDataLoader(dataset, batch_size=7, collate_fn=list, seed=3, transform=transform, **kwargs)

    fast = states_and_batches(make())
    monkeypatch.setattr(map_mode, "runs_inline", lambda *args: False)
    assert states_and_batches(make()) == fast
    monkeypatch.undo()
    states, batches = fast
    for k in sorted({0, 1, 9, 63, 64, 65, len(batches) - 1} & set(range(len(batches)))):  # around 64-batch chunks
        resumed = make()
        resumed.load_state_dict(states[k])
        it = iter(resumed)
        assert on_fast_path(it)
        assert list(it) == batches[k:]


def draws(loader, switch_thread_at: int | None = None) -> list:
    it, out = iter(loader), []
    for _ in range(len(loader)):
        if switch_thread_at is not None and len(out) == switch_thread_at:
            worker = threading.Thread(target=lambda: out.append(next(it)))
            worker.start()
            worker.join(20)
        else:
            out.append(next(it))
    return out


def test_item_generators_are_the_same_on_every_path(monkeypatch):
    def make(**kwargs):
        return StatefulDataLoader(Draws(200), batch_size=6, shuffle=True, seed=5, collate_fn=list, **kwargs)

    fast = draws(make())
    assert draws(make(), switch_thread_at=40) == fast  # a batch loaded in another thread (its own batch slot)
    assert draws(make(num_workers=2, worker_method="thread")) == fast
    with batch_scope(seed=0, epoch=0, indices=[], positions=[]):  # a user's scope around the loop
        assert draws(make()) == fast
    monkeypatch.setattr(map_mode, "runs_inline", lambda *args: False)
    assert draws(make()) == fast


@pytest.mark.parametrize("dataset", [Ints, Tuples])
@pytest.mark.parametrize("path", ["fast", "general"])
def test_an_error_counts_its_batch_and_the_next_one_follows(path, dataset, request):
    if path == "general":
        request.getfixturevalue("general")
    loader = StatefulDataLoader(dataset(20, fail={5: KeyError, 13: ValueError}), batch_size=2, collate_fn=list)
    it = iter(loader)
    assert next(it) == [0, 1] and next(it) == [2, 3]
    with pytest.raises(KeyError, match="bad item 5"):
        next(it)
    assert loader.state_dict()["observation_offset"] == 6
    assert next(it) == [6, 7]
    assert [next(it) for _ in range(2)] == [[8, 9], [10, 11]]
    with pytest.raises(ValueError, match="bad item 13"):
        next(it)
    assert list(it) == [[14, 15], [16, 17], [18, 19]]
    assert loader.state_dict()["epoch"] == 1


@pytest.mark.parametrize("stats", [False, True])
@pytest.mark.parametrize("fetch", ["getitem", "getitems", "transform"])
@pytest.mark.parametrize("path", ["fast", "general"])
def test_a_stop_iteration_from_the_dataset_ends_the_epoch_as_in_torch(path, fetch, stats, request, monkeypatch):
    """torch's loader ends the epoch where ``__getitem__``/``__getitems__`` raises StopIteration; the inline loop is
    a generator, where it would become a RuntimeError and the epoch go on. Statistics on, timed and untimed batches
    alike (every failing position in turn)."""
    if path == "general":
        request.getfixturevalue("general")
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # every batch "fast": one timed in `every`
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 4)
    for stop in range(0, 40, 3):
        def dataset(stop=stop):
            return (Tuples if fetch == "getitems" else Ints)(40, fail={stop: StopIteration})

        expected = list(DataLoader(dataset(), batch_size=2, collate_fn=list))
        assert len(expected) == stop // 2
        transform = _tagged if fetch == "transform" else None
        loader = StatefulDataLoader(dataset(), batch_size=2, collate_fn=list, transform=transform, stats=stats)
        if transform is not None:
            expected = [[(i, i) for i in batch] for batch in expected]
        assert list(loader) == expected, stop
        firsts = range(0, 40, 2)  # the next epoch is whole (the failure happens once)
        assert [b[0] for b in loader] == (list(firsts) if transform is None else [(i, i) for i in firsts])


@pytest.mark.parametrize("dataset", [Ints, Tuples])
@pytest.mark.parametrize("path", ["fast", "general"])
def test_a_keyboard_interrupt_in_getitem_loses_nothing(path, dataset, request):
    if path == "general":
        request.getfixturevalue("general")
    loader = StatefulDataLoader(dataset(12, fail={5: KeyboardInterrupt}), batch_size=2, collate_fn=list)
    it = iter(loader)
    assert next(it) == [0, 1] and next(it) == [2, 3]
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert loader.state_dict()["observation_offset"] == 4  # the interrupted batch is not delivered
    assert next(it) == [4, 5]  # the same batch comes next
    assert loader.state_dict()["observation_offset"] == 6
    assert list(it) == [[6, 7], [8, 9], [10, 11]]


@pytest.mark.parametrize("path", ["fast", "general"])
def test_statistics_count_every_batch_and_time_sampled_ones(path, request, monkeypatch):
    if path == "general":
        request.getfixturevalue("general")
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # every batch is "fast": one timed in many
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    loader = StatefulDataLoader(Ints(5003), batch_size=8, collate_fn=list)
    delivered = list(loader) + list(loader)
    stats = loader.stats()
    assert stats.batches == len(delivered) and stats.items == 2 * 5003
    assert stats.every >= 64
    assert 1 <= stats.stages["dataset"].batches <= stats.batches  # timed batches go through the general path
    assert stats.stages["collate"].items == 8 * stats.stages["collate"].batches


def test_a_batch_picked_for_timing_is_timed_at_once():
    loader = StatefulDataLoader(Ints(5003), batch_size=8, collate_fn=list)
    it = iter(loader)
    for _ in range(3):
        next(it)
    mapper = loader._mode.mapper

    def timed() -> int:
        stage = loader.stats().stages.get("dataset")
        return 0 if stage is None else stage.batches

    before = timed()
    mapper.record_next = 1  # what the iterator sets before a timed call
    assert next(it) == list(range(24, 32))
    assert mapper.record_next == 0 and timed() == before + 1


class Threads(Ints):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.where: dict[int, str] = {}

    def __getitem__(self, i: int) -> int:
        self.where[i] = threading.current_thread().name
        return i


def test_workers_started_mid_epoch_take_over_from_the_fast_path():
    """Autotune's way: a running epoch goes on from its delivered position on the new workers."""
    ds = Threads(400)
    loader = StatefulDataLoader(ds, batch_size=2, collate_fn=list, worker_method="thread",
                                worker_init_fn=lambda worker: None)  # (workers then take every batch)
    it = iter(loader)
    assert on_fast_path(it)
    got = [next(it) for _ in range(70)]  # past the first 64-batch chunk
    apply_setting(loader, Setting(workers=2, depth=2))
    got += list(it)
    assert got == [[i, i + 1] for i in range(0, 400, 2)]
    assert {ds.where[i] for i in range(140)} == {threading.current_thread().name}
    assert threading.current_thread().name not in {ds.where[i] for i in range(150, 400)}


def test_statistics_on_untimed_batches_come_straight_from_the_loop_and_resume_exactly(monkeypatch):
    """Statistics on, the 0-worker loop counts down to the next timed batch itself (its run cut there), so an untimed
    ``next()`` calls the loop's own ``__next__`` as statistics off do (old: through ``starmap``, a longer C path per
    batch); with short periods (cuts inside the 64-batch chunks), the states, resumes and counts are unchanged."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # every batch "fast": one timed in `every`
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 5)

    def make(stats: bool) -> StatefulDataLoader:
        return StatefulDataLoader(Ints(530), batch_size=7, collate_fn=list, shuffle=True, seed=3, stats=stats)

    on = make(True)
    it = iter(on)
    for _ in range(20):
        next(it)
    assert on_fast_path(it) and it._pull == it._next  # the loop's own __next__
    assert on.stats().every == 5
    on = make(True)
    states, batches = states_and_batches(on)
    assert (states, batches) == states_and_batches(make(False))
    assert on.stats().batches == len(batches) and on.stats().items == 530
    for k in (0, 3, 4, 5, 9, 63, 64, 66, len(batches) - 1):
        resumed = make(True)
        resumed.load_state_dict(states[k])
        assert list(resumed) == batches[k:]
        assert resumed.stats().batches == len(batches) - k
