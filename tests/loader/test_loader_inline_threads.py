"""Worker threads whose adaptive mapper maps cheap batches in the calling thread take the inline loop
(``OrderedMapper.inline_batches``) too: it times each batch as ``OrderedMapper.next`` does, leaves for the workers
when batches grow slow, and takes the statistics' countdown a run at a time. The general path (``OrderedMapper.next``
per batch, forced by switching the loop off) is the oracle for the states; the statistics count every batch."""

from __future__ import annotations

import math
import threading
import time

import pytest
from test_loader_inline_epoch import on_fast_path, states_and_batches  # (the 0-worker tests' helpers)
from test_loader_stats import calls_per_epoch

import torch_drt.loader._map_mode as map_mode
from torch_drt import StatefulDataLoader
from torch_drt.loader._stats_recorder import StatsRecorder

SLOW = range(700, 784)  # items that take 2 ms: the batches holding them go to the workers


class Phases:
    """Ints, slow in ``SLOW``; where each item was mapped (the thread's name)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.where: dict[int, str] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.where[i] = threading.current_thread().name
        if i in SLOW:
            time.sleep(0.002)
        return i


def make(stats: bool = True) -> StatefulDataLoader:
    return StatefulDataLoader(Phases(2000), batch_size=7, collate_fn=list, num_workers=2, worker_method="thread",
                              persistent_workers=True, seed=3, stats=stats)


@pytest.fixture
def short_period(monkeypatch):
    """Every batch "fast", one timed in 5: the loop's runs are cut at every fifth batch."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 5)


@pytest.mark.parametrize("stats", [False, True])
def test_threads_mapping_inline_take_the_loop_and_slow_batches_leave_it_for_the_workers(stats):
    loader = make(stats)  # (statistics off: the loop's runs are whole 64-batch chunks)
    loader._mode.mapper._cost.below_s = 0.001  # inline under 1 ms, back on the workers over 4: load cannot blur it
    it = iter(loader)
    assert on_fast_path(it)
    got = list(it)
    assert got == [list(range(i, min(i + 7, 2000))) for i in range(0, 2000, 7)]
    where, me = loader.dataset.where, threading.current_thread().name
    assert me in {where[i] for i in range(SLOW[0])}  # cheap: inline (after the workers' first ones)
    assert me not in {where[i] for i in SLOW[-14:]}  # slow: on the workers
    if stats:
        assert loader.stats().batches == len(got) and loader.stats().items == 2000


def test_statistics_count_every_batch_and_states_resume_as_on_the_general_path(short_period, monkeypatch):
    loader = make()
    states, batches = states_and_batches(loader)
    assert loader.stats().batches == len(batches) and loader.stats().items == 2000
    _, batches2 = states_and_batches(loader)  # a second epoch, the countdown carried over
    assert batches2 == batches
    assert loader.stats().batches == 2 * len(batches) and loader.stats().items == 4000
    with monkeypatch.context() as general:
        general.setattr(map_mode, "runs_inline", lambda *args: False)
        assert states_and_batches(make()) == (states, batches)
    for k in (0, 4, 5, 63, 64, 99, 101, 104, 110, 150, len(batches) - 1):  # around cuts, chunks and the slow range
        resumed = make()
        resumed.load_state_dict(states[k])
        assert list(resumed) == batches[k:], k
        assert (resumed.stats().batches, resumed.stats().items) == (len(batches) - k, 2000 - 7 * k), k


@pytest.mark.parametrize("stats", [False, True])
def test_threads_mapping_inline_map_the_planned_chunks_in_the_loop_not_through_next(stats):
    """Once the mapper maps inline, the loop's runs take the planned batches: ``OrderedMapper.next`` only plans each
    chunk of 64 batches (and maps its first), it is not called per batch (as it was before the loop took threads)."""
    loader = StatefulDataLoader(list(range(2000)), batch_size=7, collate_fn=list, num_workers=2,
                                worker_method="thread", persistent_workers=True, stats=stats)
    loader._mode.mapper._cost.below_s = 1.0  # inline after the workers' first batches, however slow profiled
    assert len(list(loader)) == 286
    assert loader._mode.mapper._inline
    calls = calls_per_epoch(loader)
    assert calls["OrderedMapper.next"] <= 286 // 64 + 3, calls["OrderedMapper.next"]


def test_an_epoch_mapped_inline_starts_no_worker_thread():
    """Non-persistent thread workers are made anew at each ``iter()``; an adaptive mapper that maps inline from the
    epoch's start needs none, and starting two threads costs milliseconds per epoch: they start at the first item
    sent to them. The first epoch measures its first items on the workers (they start); the next maps inline."""
    loader = StatefulDataLoader(Phases(300), batch_size=7, collate_fn=list, num_workers=2, worker_method="thread")
    loader._mode.mapper._cost.below_s = math.inf  # (cheap whatever the machine's load)
    started = []
    for _ in range(2):
        it = iter(loader)
        batches = [next(it) for _ in range(20)]  # past the first epoch's measured items
        started.append(loader._mode.mapper._pool._threads)
        assert batches + list(it) == [list(range(i, min(i + 7, 300))) for i in range(0, 300, 7)]
    assert started == [2, 0]
    me = threading.current_thread().name
    assert set(loader.dataset.where.values()) == {me}  # the second epoch's items (it overwrote the first's)
