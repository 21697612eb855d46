"""loader.stats() across iterators (issue 28): the sampling countdown carries over from one iterator to the next, so
a new epoch's first batch is not timed unless the countdown says so; its wait still counts as start-up."""

from __future__ import annotations

import pytest

from torch_drt import StatefulDataLoader
from torch_drt.loader._stats_recorder import StatsRecorder

THREADS = {"worker_method": "thread"}


class Ints:
    def __init__(self, n: int, bad: frozenset = frozenset()) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.bad:
            raise ValueError(i)
        return i


@pytest.fixture
def sampled(monkeypatch):
    """Every batch is "fast" and the sampling period grows without bound: few batches are timed."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**15)
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 10**6)


def count_timed(loader) -> list[int]:
    """A counter of ``loader``'s timed calls (``StatsRecorder.timed``), as a one-element list."""
    timed, real = [0], loader._stats.timed

    def counting(*args):
        timed[0] += 1
        real(*args)
    loader._stats.timed = counting
    return timed


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}], ids=["inline", "threads"])
def test_a_new_epoch_does_not_time_its_first_batch_yet_counts_its_startup(kwargs, sampled):
    loader = StatefulDataLoader(Ints(4000), batch_size=4, collate_fn=list, persistent_workers=bool(kwargs), **kwargs)
    delivered = list(loader)  # timed calls 1, 2, 4, ..., 512: `every` is 1024 at the epoch's end
    timed = count_timed(loader)
    for _ in range(4):  # 4000 calls: with the countdown carried over, 2 or 3 are timed (old: 4 first ones too)
        startup = loader._stats.startup_ns
        it = iter(loader)
        delivered.append(next(it))
        assert loader._stats.startup_ns > startup  # the first call's wait is start-up
        assert loader.stats().batches == len(delivered)  # read mid-period: the batches so far
        delivered += list(it)
    assert timed[0] <= 3
    stats = loader.stats()
    assert stats.batches == len(delivered) == 5000
    assert stats.items == sum(len(b) for b in delivered)
    assert stats.wait_s <= stats.wall_s and stats.startup_s <= stats.wait_s


def test_a_new_iterators_first_call_that_fails_counts_no_batch(sampled):
    """A failed first call: its wait is start-up, yet no batch counts (nor a period's call); counts stay exact."""
    loader = StatefulDataLoader(Ints(4000, frozenset({0})), batch_size=4, collate_fn=list)
    delivered = []
    for _ in range(3):
        it = iter(loader)
        startup = loader._stats.startup_ns
        with pytest.raises(ValueError):
            next(it)
        assert loader._stats.startup_ns > startup
        delivered += list(it)
    stats = loader.stats()
    assert stats.batches == len(delivered) == 3 * 999
    assert stats.items == sum(len(b) for b in delivered)


@pytest.mark.parametrize("in_order", [True, False])
def test_counts_stay_exact_over_iterators_left_at_any_call_of_the_countdown(in_order, monkeypatch):
    """Iterators dropped after 0 to 9 batches, a short sampling period carried from each to the next."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 4)
    loader = StatefulDataLoader(Ints(40), batch_size=2, collate_fn=list, in_order=in_order)
    delivered = []
    for n in list(range(10)) * 3:
        it = iter(loader)
        delivered += [next(it) for _ in range(n)]
        del it
        assert loader.stats().batches == len(delivered), n
        assert loader.stats().items == 2 * len(delivered), n


@pytest.mark.parametrize("restart", ["iter", "resume"])
def test_counts_stay_exact_when_a_reset_cuts_the_inline_loops_run(restart, sampled):
    """The 0-worker loop takes its planned chunk's batches in one run, the countdown taken per run: a new
    ``iter()`` or a resume resets the mapper mid-run (the superseded iterator still referenced, its batches counted
    after the reset), and the batches of the run it never delivered are not counted."""
    loader = StatefulDataLoader(Ints(4000), batch_size=4, collate_fn=list)
    delivered = list(loader)  # `every` grows past an epoch: the next epochs' batches are untimed
    iterators = []
    for n in (1, 5, 63, 64, 65, 130, 7):  # cut inside a planned chunk (64 batches) and at its ends
        if restart == "resume":
            loader.load_state_dict(loader.state_dict())
        iterators.append(iter(loader))
        delivered += [next(iterators[-1]) for _ in range(n)]
        assert loader.stats().batches == len(delivered), n
    delivered += list(iter(loader))
    stats = loader.stats()
    assert stats.batches == len(delivered) > 1000 + 335
    assert stats.items == sum(len(b) for b in delivered)
