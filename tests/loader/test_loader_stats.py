"""loader.stats() (issue 28): where the time goes, per stage and worker; the verdict names the slow stage.

Pipelines are made slow on purpose in one stage (a 20 ms sleep against no-ops): the assertions are on which stage
dominates and on counts, never on absolute times.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import Counter
from concurrent.futures.process import BrokenProcessPool

import pytest

from torch_drt import StatefulDataLoader
from torch_drt.loader._stats_recorder import StatsRecorder
from torch_drt.loader.stats import LoaderStats

SLOW_S = 0.02
PROCESS = {"worker_method": "process", "multiprocessing_context": "fork"}
THREADS = {"worker_method": "thread"}


class Ints:
    def __init__(self, n: int, sleep: float = 0.0) -> None:
        self.n, self.sleep = n, sleep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.sleep:
            time.sleep(self.sleep)
        return i


def slow_collate(items):
    time.sleep(SLOW_S)
    return list(items)


def slow_transform(item):
    time.sleep(SLOW_S / 2)
    return item


def drain(loader, consumer_sleep: float = 0.0) -> list:
    out = []
    for batch in loader:
        out.append(batch)
        if consumer_sleep:
            time.sleep(consumer_sleep)
    return out


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}, {"num_workers": 2, **PROCESS}],
                         ids=["inline", "threads", "processes"])
def test_a_slow_getitem_is_named_by_the_verdict(kwargs):
    loader = StatefulDataLoader(Ints(24, SLOW_S), batch_size=2, collate_fn=list, **kwargs)
    drain(loader)
    stats = loader.stats()
    verdict = stats.verdict()
    assert verdict.startswith("input-bound"), str(stats)
    assert stats.dominant_stage()[0] == "dataset", str(stats)
    assert " dataset " in verdict
    if not kwargs:
        assert "set num_workers > 0" in verdict
    else:  # busy workers or too few batches in flight (how busy depends on the machine's load)
        assert "raise num_workers" in verdict or "raise prefetch_" in verdict


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **PROCESS}], ids=["inline", "processes"])
def test_a_slow_collate_is_named_by_the_verdict(kwargs):
    loader = StatefulDataLoader(Ints(24), batch_size=2, collate_fn=slow_collate, **kwargs)
    drain(loader)
    stats = loader.stats()
    assert stats.verdict().startswith("input-bound"), str(stats)
    assert stats.dominant_stage()[0] == "collate", str(stats)
    assert " collate " in stats.verdict()


def test_a_slow_transform_is_named_by_the_verdict():
    loader = StatefulDataLoader(Ints(16), batch_size=2, collate_fn=list, transform=slow_transform)
    drain(loader)
    assert loader.stats().dominant_stage()[0] == "transform", str(loader.stats())


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}], ids=["inline", "threads"])
def test_a_slow_consumer_is_told_loading_is_not_the_bottleneck(kwargs):
    loader = StatefulDataLoader(Ints(64), batch_size=4, collate_fn=list, **kwargs)
    drain(loader, consumer_sleep=SLOW_S)
    stats = loader.stats()
    assert stats.verdict().startswith("consumer-bound"), str(stats)
    assert "data loading is not your bottleneck" in stats.verdict()
    assert stats.consumer_s > stats.wait_s - stats.startup_s


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}, {"num_workers": 2, **PROCESS}],
                         ids=["inline", "threads", "processes"])
def test_counts_equal_the_items_delivered_over_epochs(kwargs, monkeypatch):
    """Fast batches are timed one in many: the counts stay exact (a short last batch included)."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # every batch is "fast": one timed in many
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    loader = StatefulDataLoader(Ints(1001), batch_size=8, collate_fn=list, persistent_workers=bool(kwargs), **kwargs)
    delivered = drain(loader) + drain(loader)
    half = iter(loader)
    delivered += [next(half) for _ in range(37)]  # an epoch left mid-way: stats() counts it
    stats = loader.stats()
    assert stats.batches == len(delivered)
    assert stats.items == sum(len(b) for b in delivered)
    assert stats.every >= 64  # sampling was on: counts are exact anyway


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}, {"num_workers": 2, **PROCESS}],
                         ids=["inline", "threads", "processes"])
def test_stage_times_add_up_within_the_wall_time(kwargs):
    loader = StatefulDataLoader(Ints(48, 0.01), batch_size=2, collate_fn=list, **kwargs)
    drain(loader)
    stats = loader.stats()
    workers = max(1, stats.num_workers)
    on_workers = sum(s.busy_s for name, s in stats.stages.items() if name not in ("source", "transport", "device"))
    assert 0 < on_workers <= stats.wall_s * workers
    for w in stats.workers.values():
        assert w.busy_s <= stats.wall_s * 1.05 + 0.01 and w.wait_s >= 0
    dataset = stats.stages["dataset"]  # timed batches stand for the ones before them: the last few may be left out
    assert 12 <= dataset.batches <= 24 and dataset.items == 2 * dataset.batches
    assert stats.wait_s <= stats.wall_s
    assert abs(stats.wait_s + stats.consumer_s - stats.wall_s) < 1e-6


def test_statistics_survive_a_resume():
    loader = StatefulDataLoader(Ints(1000), batch_size=10, collate_fn=list, num_workers=2, **THREADS)
    it = iter(loader)
    first = [next(it) for _ in range(37)]  # `it` stays referenced: superseded, not collected
    state = loader.state_dict()
    loader.load_state_dict(state)
    rest = drain(loader)
    assert len(first) + len(rest) == 100
    stats = loader.stats()
    assert stats.batches == 100 and stats.items == 1000


def test_statistics_survive_a_worker_death(monkeypatch):
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 1)  # every batch timed: the workers' counts are exact
    class Dies(Ints):
        def __getitem__(self, i):
            if i == 2:
                os._exit(3)
            return i

    loader = StatefulDataLoader(Dies(40), batch_size=2, num_workers=2, collate_fn=list, **PROCESS)
    got, failed, it = [], 0, iter(loader)
    while True:
        try:
            got.append(next(it))
        except BrokenProcessPool:
            failed += 1
        except StopIteration:
            break
    loader.close()
    stats = loader.stats()
    assert failed == 1 and len(got) == 19
    assert stats.batches == 19 and stats.items == 38
    assert sum(w.batches for i, w in stats.workers.items() if i >= 0) >= 19  # the restarted worker's too
    assert set(stats.workers) >= {0, 1}


def test_the_dict_is_flat_and_names_stages_and_workers():
    loader = StatefulDataLoader(Ints(32), batch_size=4, collate_fn=list, num_workers=2, **THREADS)
    drain(loader)
    stats = loader.stats()
    flat = stats.to_dict()
    assert all(isinstance(k, str) and isinstance(v, int | float) for k, v in flat.items())
    assert flat["batches"] == 8 and flat["items"] == 32
    assert "stage/dataset/busy_s" in flat and "stage/collate/items" in flat and "wait_p95_ms" in flat
    text = str(stats)
    assert "dataset" in text and "collate" in text and stats.verdict() in text
    assert isinstance(stats, LoaderStats)


def test_statistics_can_be_switched_off(monkeypatch):
    off = StatefulDataLoader(Ints(8), batch_size=2, stats=False)
    assert len(drain(off)) == 4
    with pytest.raises(RuntimeError, match="stats=False"):
        off.stats()
    monkeypatch.setenv("TORCH_DRT_STATS", "0")
    with pytest.raises(RuntimeError, match="TORCH_DRT_STATS"):
        StatefulDataLoader(Ints(8), batch_size=2).stats()
    assert StatefulDataLoader(Ints(8), batch_size=2, stats=True).stats().batches == 0
    with pytest.raises(ValueError, match="stats="):
        StatefulDataLoader(Ints(8), batch_size=2, stats="yes")


def test_no_batches_yet_says_so():
    assert "no batches yet" in StatefulDataLoader(Ints(8), batch_size=2).stats().verdict()


def synthetic(num_workers: int, wait_s: float, busy_s: float, stages: dict[str, float]) -> LoaderStats:
    """Statistics of 10 s of a loop, with these numbers."""
    from torch_drt.loader.stats import StageStats, WorkerStats

    workers = {i: WorkerStats(i, 50, busy_s / max(1, num_workers), 0.0, {}) for i in range(max(1, num_workers))}
    return LoaderStats(
        num_workers=num_workers, worker_method="process", batches=100, items=800, wall_s=10.0, wait_s=wait_s,
        consumer_s=10.0 - wait_s, startup_s=0.0, every=1, wait_p50_ms=1.0, wait_p95_ms=2.0,
        stages={name: StageStats(name, 100, 800, s) for name, s in stages.items()}, workers=workers, bytes={},
        in_flight_mean=4.0, ready_mean=0.0,
    )


@pytest.mark.parametrize(
    ("num_workers", "wait_s", "busy_s", "stages", "expected"),
    [
        (2, 0.2, 19.0, {"dataset": 15.0, "collate": 1.0}, "consumer-bound: the loop waited for data 2%"),
        (2, 6.0, 19.6, {"dataset": 14.0, "collate": 6.0}, "dataset 70% of loading time; 2 workers busy 98%: raise "
                                                          "num_workers"),
        (4, 6.0, 8.0, {"dataset": 2.0, "collate": 6.0}, "collate 75% of loading time; 4 workers busy 20%: raise "
                                                        "prefetch_factor"),
        (0, 6.0, 6.0, {"transform": 5.0, "collate": 1.0}, "transform 83% of loading time, loaded in the calling "
                                                          "thread: set num_workers > 0"),
        (2, 6.0, 2.0, {"transport": 5.0, "collate": 1.0}, "transport 83% of loading time: unpacking"),
    ],
)
def test_the_verdict_follows_the_numbers(num_workers, wait_s, busy_s, stages, expected):
    assert expected in synthetic(num_workers, wait_s, busy_s, stages).verdict()


def test_idle_workers_are_told_the_setting_that_holds_their_batches_in_flight():
    """Process workers keep ``num_workers * prefetch_factor`` (torch's default 2) in flight: ``prefetch_depth``
    would replace it with ``num_workers + depth``, fewer; thread workers keep ``num_workers + prefetch_depth``."""
    stats = synthetic(4, 6.0, 8.0, {"dataset": 2.0, "collate": 6.0})
    assert stats.verdict().endswith("raise prefetch_factor (more batches in flight)")
    threads = dataclasses.replace(stats, worker_method="thread")
    assert threads.verdict().endswith("raise prefetch_depth (more batches in flight)")


def slow_sample_id(sample):
    time.sleep(SLOW_S)
    return sample.sample_id


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cache_loader_records_its_stages(runtime, tmp_path, workers):
    from conftest import ListSource

    import torch_drt as drt

    res = runtime.from_cache_sources([ListSource("l", 40)], tmp_path, reader_config=drt.ReaderConfig(seed=3),
                                     writer_config=drt.WriterConfig(show_progress=False))
    extra = {"num_workers": 2, "multiprocessing_context": "fork"} if workers else {}
    loader = res.to_torch_dataloader(sample_transform_fn=slow_sample_id, collate_fn=list, batch_size=4,
                                             shuffle=False, **extra)
    got = [x for b in loader for x in b]
    stats = loader.stats()
    assert stats.batches == 10 and stats.items == len(got) == 40
    assert {"dataset", "transform", "collate"} <= set(stats.stages)
    assert stats.dominant_stage()[0] == "transform", str(stats)


class Failing(Ints):
    """Raises ValueError on indices in ``bad``, and KeyboardInterrupt once on ``interrupt``."""

    def __init__(self, n: int, bad: set[int], interrupt: int | None = None) -> None:
        super().__init__(n)
        self.bad, self.interrupt = bad, interrupt

    def __getitem__(self, i: int) -> int:
        if i == self.interrupt:
            self.interrupt = None
            raise KeyboardInterrupt
        if i in self.bad:
            raise ValueError(i)
        return i


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}], ids=["inline", "threads"])
def test_sampled_counts_stay_exact_with_failed_calls_and_reads_midway(kwargs, monkeypatch):
    """Calls that deliver nothing (an error, an interrupt) and stats() read mid-period leave the counts exact."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # every batch is "fast": one timed in many
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    bad = {8 * b for b in (3, 20, 21, 45, 90, 91, 92, 150)}  # the first item of these batches fails
    dataset = Failing(1601, bad, interrupt=8 * 60 + 1)
    loader = StatefulDataLoader(dataset, batch_size=8, collate_fn=list, persistent_workers=bool(kwargs), **kwargs)
    delivered, failed, interrupted, reads = [], 0, 0, 0
    for _ in range(2):
        it = iter(loader)
        while True:
            try:
                delivered.append(next(it))
            except StopIteration:
                break
            except ValueError:
                failed += 1
            except KeyboardInterrupt:
                interrupted += 1
            if len(delivered) % 97 == 0:
                loader.stats()  # counts the untimed batches so far; the period goes on
                reads += 1
    stats = loader.stats()
    assert failed == 2 * len(bad) and interrupted == 1 and reads > 2
    assert stats.batches == len(delivered) == 2 * (201 - len(bad))
    assert stats.items == sum(len(b) for b in delivered)
    assert stats.every >= 16  # sampling was on


def calls_per_epoch(loader) -> Counter:
    """The Python functions and builtins a whole epoch of ``loader`` calls, counted (``sys.setprofile``)."""
    calls: Counter = Counter()

    def profile(frame, event, arg):
        if event == "call":
            calls[frame.f_code.co_qualname] += 1
        elif event == "c_call":
            calls[getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(profile)
    try:
        for _ in loader:
            pass
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, "persistent_workers": True, **THREADS}],
                         ids=["inline", "threads"])
def test_an_untimed_inline_batch_calls_nothing_more_than_statistics_off(kwargs, monkeypatch):
    """The inline loop's untimed batches (0 workers; threads mapping cheap batches inline) run the statistics-off
    code: the loop counts down to the next timed batch a run of batches at a time, so statistics on call no more
    functions per epoch than a timed batch and the epoch's ends do (old: one ``next()`` per batch; with threads,
    until the loop took their batches too)."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)  # one timed batch in MAX_EVERY
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    on, off = (StatefulDataLoader(Ints(4000), batch_size=4, collate_fn=list, stats=s, **kwargs) for s in (True, False))
    for loader in (on, off):
        for _ in range(12):  # `every` grows to MAX_EVERY (it at most doubles at each timed batch)
            # threads: inline after their first batches, however slow profiled or loaded (set again each epoch: the
            # first iter() may make the pipeline again, for the seed it draws)
            loader._mode.mapper._cost.below_s = 1.0
            drain(loader)
    assert on.stats().every >= 1000  # 1000 batches per epoch: at most one or two of them timed
    extra = calls_per_epoch(on) - calls_per_epoch(off)
    assert sum(extra.values()) < 150, extra.most_common(5)
    assert on.stats().batches == 13 * 1000 and on.stats().items == 13 * 4000


def test_very_fast_batches_are_timed_once_per_budget_not_once_per_4096():
    """5 us batches (the 100k-ints benchmark's) settle at one timed batch per ``BUDGET_NS`` (50 ms: one in 10,000):
    a timed batch's ~90 us on cold caches then costs ~0.2% of the time (with the old cap, one in 4,096: ~0.5%). A
    synthetic clock: each timed call stands for ``every`` calls of 5 us."""
    recorder, now = StatsRecorder(), 0
    for _ in range(40):
        weight = recorder.every
        now += weight * 5_000
        recorder.timed(now - 5_000, now, 64, weight, False)
    assert recorder.every == StatsRecorder.BUDGET_NS // 5_000 == 10_000
    assert recorder.wall_ns == now and recorder.batches == 40


@pytest.mark.parametrize("in_order", [True, False])
def test_counts_stay_exact_when_an_epoch_ends_on_any_call_of_the_countdown(in_order, monkeypatch):
    """Epochs of 1 to 16 batches end on every position of a short sampling period (timed calls 1, 3, 7, 11, ...):
    an epoch's end on the countdown's last untimed call is told from the countdown's own end."""
    monkeypatch.setattr(StatsRecorder, "EXACT_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "BUDGET_NS", 10**12)
    monkeypatch.setattr(StatsRecorder, "MAX_EVERY", 4)
    for n in range(1, 17):
        loader = StatefulDataLoader(Ints(2 * n), batch_size=2, collate_fn=list, in_order=in_order)
        delivered = drain(loader)
        assert (loader.stats().batches, loader.stats().items) == (n, 2 * n), n
        delivered += drain(loader)
        assert (loader.stats().batches, loader.stats().items) == (len(delivered), 4 * n), n
