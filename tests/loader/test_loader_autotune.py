"""num_workers="auto" / prefetch_depth="auto" (issue 28): the search, its memory cap, its checkpoint.

Throughput is not measured here: a cost model reads the setting the loader's pipeline really runs (its mapper's
workers and batches in flight) and says what a trial of it would measure, so the choices are deterministic and a
setting that was never applied to the pipeline cannot pay. One test runs the real measurements, asserting data and
state only.
"""

from __future__ import annotations

import heapq
import os

import pytest
import torch
from autotune_rows import Rows as AutotuneRows

from torch_drt import StatefulDataLoader
from torch_drt.loader._autotune import MAX_TUNED_WORKERS, STATE_KEY
from torch_drt.loader._memory import batch_bytes
from torch_drt.loader._tuner import (
    PLANNED_TRIALS,
    THREAD_START,
    HillClimb,
    MemoryModel,
    Setting,
    Trial,
    TrialClock,
    trial_batches,
)

ROW = 100  # int64 per item: 800 bytes
BATCH = 4


class Rows(AutotuneRows):
    def __init__(self, n: int) -> None:
        super().__init__(n, ROW)


def worker_bound(workers: int, depth: int, per_worker: float = 50.0, consumer: float = 1000.0) -> Trial:
    """A pipeline whose worker stage is slow: each worker loads ``per_worker`` batches/s, the caller takes up to
    ``consumer``; batches ahead smooth a little (2% each, up to 4)."""
    rate = min(consumer, workers * per_worker * (1 + 0.02 * min(depth, 4)))
    return Trial(throughput=rate, wait_share=1 - rate / consumer)


def climb(model, cap: int = 1 << 40, batch: int = 0, worker: int = 0, processes: bool = False) -> HillClimb:
    search = HillClimb(Setting(1, 1), MemoryModel(cap, processes), max_workers=32)
    for _ in range(40):
        if search.done:
            break
        s = search.current
        trial = model(s.workers, s.depth)
        search.observe(Trial(trial.throughput, trial.wait_share, batch, worker))
    assert search.done
    return search


def test_a_slow_worker_stage_gets_more_workers_than_a_fast_one():
    slow = climb(worker_bound)
    fast = climb(lambda w, d: worker_bound(w, d, per_worker=5000.0))
    assert slow.best.workers >= 16, slow.history
    assert fast.best.workers <= 2, fast.history


def test_every_setting_tried_after_the_first_fits_the_cap():
    memory = dict(batch=1000, worker=10_000)
    search = climb(worker_bound, cap=35_000, **memory, processes=False)
    model = MemoryModel(35_000, False, memory["batch"], memory["worker"])
    assert all(model.fits(s) for s, _ in search.history[1:]), search.history
    assert model.fits(search.best)
    assert search.best.workers == 3  # the most the cap allows (w * 10000 + (w + d) * 1000 <= 35000, d >= 1)


def test_a_fixed_num_workers_is_kept_under_a_cap_too_small_for_it():
    memory = MemoryModel(1000, False, batch_bytes=1000)
    search = HillClimb(Setting(4, 1), memory, max_workers=4, tune_workers=False)
    search.observe(Trial(100.0, 0.5, 1000, 0))
    assert search.done and search.best == search.current == Setting(4, 1)  # the cap bounds only what is searched


def test_batch_bytes_counts_tensors_through_containers():
    batch = {"x": torch.zeros(4, 10, dtype=torch.int64), "y": [b"abc", "de"], "z": (torch.zeros(3),)}
    assert batch_bytes(batch) == 320 + 3 + 2 + 12


def model_of(loader, per_worker: float = 50.0, seen: list | None = None):
    """A ``measure`` reading the pipeline's own workers and depth (not the setting the tuner believes in)."""

    def measure(_loader, batch, setting, batches, elapsed_ns):
        mapper = loader._mode.mapper
        workers, depth = mapper.num_workers, mapper.in_flight - mapper.num_workers
        if seen is not None:
            seen.append((workers, depth))
        trial = worker_bound(workers, depth, per_worker)
        return Trial(trial.throughput, trial.wait_share, batch_bytes(batch), 0)

    return measure


def auto_loader(n: int = 20000, **kwargs) -> StatefulDataLoader:
    loader = StatefulDataLoader(Rows(n), batch_size=BATCH, shuffle=True, seed=7, worker_method="thread",
                                num_workers="auto", prefetch_depth="auto", **kwargs)
    loader._autotune.climb.max_workers = 32  # (by default: 4 per CPU of this machine)
    return loader


def firsts(batches) -> list[int]:
    return [int(v) for b in batches for v in b[:, 0]]


def first_trial(loader) -> int:
    """Batches delivered until the first trial (``THREAD_START`` thread workers, one batch ahead) ends: its warm-up
    (the loader's start) and measured part."""
    return sum(trial_batches(Setting(THREAD_START, 1), loader._autotune.budget, threads=True, started=True))


def test_the_choice_is_in_the_state_and_a_resume_runs_it_without_tuning():
    fixed = firsts(StatefulDataLoader(Rows(20000), batch_size=BATCH, shuffle=True, seed=7))
    loader = auto_loader()
    loader._autotune.measure = model_of(loader)
    it = iter(loader)
    head = [next(it) for _ in range(400)]
    assert loader._autotune.done
    state = loader.state_dict()
    chosen = state[STATE_KEY]
    assert chosen["done"] is True and chosen["num_workers"] >= 8, loader._autotune.climb.history
    assert loader._mode.mapper.num_workers == chosen["num_workers"] == loader.num_workers
    tail = list(it)
    assert firsts(head + tail) == fixed  # changes of workers mid-epoch lose and repeat nothing

    resumed = auto_loader()

    def no_search(*args):
        raise AssertionError("a resumed loader searched again")

    resumed._autotune.measure = no_search
    resumed.load_state_dict(state)
    assert (resumed.num_workers, resumed.prefetch_depth) == (chosen["num_workers"], chosen["prefetch_depth"])
    assert firsts(resumed) == fixed[400 * BATCH:]
    assert resumed._mode.mapper.num_workers == chosen["num_workers"]
    assert resumed.state_dict()[STATE_KEY]["num_workers"] == chosen["num_workers"]


def test_a_checkpoint_taken_while_searching_resumes_the_search_from_its_setting():
    loader = auto_loader()
    loader._autotune.measure = model_of(loader)
    it = iter(loader)
    for _ in range(first_trial(loader)):
        next(it)
    state = loader.state_dict()[STATE_KEY]
    assert state["done"] is False and state["num_workers"] > 1
    resumed = auto_loader()
    resumed._autotune.measure = model_of(resumed)
    resumed.load_state_dict(loader.state_dict())
    assert resumed.num_workers == state["num_workers"] and not resumed._autotune.done
    it = iter(resumed)
    for _ in range(400):
        next(it)
    assert resumed._autotune.done and resumed.num_workers > state["num_workers"], resumed._autotune.climb.history


def test_the_memory_cap_bounds_workers_and_batches_ahead():
    one = ROW * 8 * BATCH  # bytes of one batch
    loader = auto_loader(autotune_memory_cap=5 * one)
    seen: list = []
    loader._autotune.measure = model_of(loader, seen=seen)
    for _ in loader:
        pass
    state = loader.state_dict()[STATE_KEY]
    assert state["batch_bytes"] == one and state["memory_cap"] == 5 * one
    assert state["done"] and state["num_workers"] + state["prefetch_depth"] <= 5
    assert state["num_workers"] == 4  # the cost model pays for workers: the cap is the bound
    assert all(w + d <= 5 for w, d in seen), seen


def test_a_resume_without_a_cap_searches_on_under_the_checkpoints_cap():
    one = ROW * 8 * BATCH
    loader = auto_loader(autotune_memory_cap=9 * one)
    loader._autotune.measure = model_of(loader)
    it = iter(loader)
    for _ in range(first_trial(loader)):  # the first trial is over, the second (16 workers, shrunk to 8) runs
        next(it)
    state = loader.state_dict()
    assert not state[STATE_KEY]["done"] and state[STATE_KEY]["num_workers"] == 8
    resumed = auto_loader()  # no cap given: the one the search ran under holds, not half the memory available
    seen: list = []
    resumed._autotune.measure = model_of(resumed, seen=seen)
    resumed.load_state_dict(state)
    for _ in resumed:
        pass
    final = resumed.state_dict()[STATE_KEY]
    assert final["done"] and final["memory_cap"] == 9 * one and final["num_workers"] == 8, final
    assert seen and all(w + d <= 9 for w, d in seen), seen


def test_real_measurements_with_process_workers_keep_the_data():
    kwargs = dict(batch_size=BATCH, shuffle=True, seed=3)
    fixed = firsts(StatefulDataLoader(Rows(600), **kwargs))
    loader = StatefulDataLoader(Rows(600), num_workers="auto", multiprocessing_context="fork", **kwargs)
    assert firsts(loader) == fixed
    state = loader.state_dict()[STATE_KEY]
    assert state["num_workers"] >= 1 and state["prefetch_depth"] == 2 and state["batch_bytes"] == ROW * 8 * BATCH


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": "many"}, "num_workers='many' must be an int"),
        ({"prefetch_depth": "deep", "num_workers": 2}, "prefetch_depth='deep' must be"),
        ({"num_workers": "auto", "prefetch_factor": 2}, "not prefetch_factor=2"),
        ({"prefetch_depth": "auto", "num_workers": 0}, "needs num_workers > 0"),
        ({"num_workers": "auto", "autotune_memory_cap": 0}, "autotune_memory_cap=0 must be an int > 0"),
        ({"num_workers": 2, "autotune_memory_cap": 1 << 20}, "give one"),
        ({"num_workers": "auto", "stats": False}, "stats=False"),
    ],
)
def test_arguments_are_checked_up_front(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StatefulDataLoader(Rows(8), **kwargs)


def test_auto_is_refused_for_streams():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(ValueError, match="map-style dataset's loader"):
        StatefulDataLoader(Stream(), num_workers="auto")


def test_a_malformed_autotune_state_is_refused_with_its_field():
    loader = auto_loader()
    state = loader.state_dict()
    state[STATE_KEY] = {"num_workers": 0, "prefetch_depth": 2}
    with pytest.raises(ValueError, match=r"state\['autotune'\]\['num_workers'\]"):
        loader.load_state_dict(state)


def test_process_workers_are_restarted_at_the_chosen_count_and_the_data_is_kept():
    kwargs = dict(batch_size=BATCH, shuffle=True, seed=5)
    fixed = firsts(StatefulDataLoader(Rows(2000), **kwargs))
    loader = StatefulDataLoader(Rows(2000), num_workers="auto", multiprocessing_context="fork", **kwargs)
    loader._autotune.climb.max_workers = 4
    loader._autotune.measure = model_of(loader)
    it = iter(loader)
    head = [next(it) for _ in range(100)]
    assert loader._autotune.done and loader.num_workers == 4
    assert len(loader._mode.mapper.worker_pids()) == 4
    assert firsts(head + list(it)) == fixed


def test_the_search_starts_no_trial_its_budget_cannot_finish():
    loader = auto_loader(n=1280 * BATCH)
    loader._autotune.climb.max_workers = MAX_TUNED_WORKERS
    loader._autotune.measure = model_of(loader, per_worker=10.0)  # every step up pays: the budget ends the search
    budget = loader._autotune.budget  # 5% of the epoch: 64 batches
    it = iter(loader)
    n = 0
    while not loader._autotune.done:
        next(it)
        n += 1
    measured = [s for s, _ in loader._autotune.climb.history]
    cost = sum(sum(trial_batches(s, budget, threads=True, started=i == 0)) for i, s in enumerate(measured))
    assert n == cost <= budget, (n, measured)  # every trial started was measured: none was cut short
    assert [s.workers for s in measured] == [4, 16, 32], measured  # 64 did not fit the batches left: 32 did
    assert loader.num_workers == loader._mode.mapper.num_workers == 32


def test_a_trial_that_ends_on_the_budgets_last_batch_is_measured():
    loader = auto_loader(n=1280 * BATCH)
    tune = loader._autotune
    tune.climb.max_workers = MAX_TUNED_WORKERS
    tune.budget = tune.climb.budget = 63  # trials of 4 (13 batches), 16 (17) and 32 (33) threads: the third ends on it
    tune.measure = model_of(loader, per_worker=10.0)
    it = iter(loader)
    for _ in range(63):
        next(it)
    assert tune.done and [s.workers for s, _ in tune.climb.history] == [4, 16, 32], tune.climb.history
    assert loader.num_workers == 32


@pytest.mark.parametrize("epoch", [1280, 12800])
def test_trials_take_their_share_of_the_budget(epoch):
    loader = auto_loader(n=epoch * BATCH)
    applied = []
    loader._autotune.measure = model_of(loader, seen=applied)
    budget = loader._autotune.budget
    assert budget == max(64, epoch // 20)  # 5% of the epoch, at least 64 batches
    it = iter(loader)
    n = 0
    while not applied:  # the first trial ends with its measurement
        next(it)
        n += 1
    in_flight = THREAD_START + 1
    warmup, measured = in_flight, max(8, in_flight, budget // PLANNED_TRIALS)  # the loader's start: a round; >= 8
    assert n == warmup + measured, (n, budget)
    assert (epoch, measured) in ((1280, 8), (12800, 80))  # a ten times longer epoch: ten times longer trials


def test_a_thread_trial_warms_up_a_round_only_when_the_loader_starts_with_it():
    assert trial_batches(Setting(2, 1), 64) == (3, 8)  # each process's first batch carries its start
    assert trial_batches(Setting(4, 1), 64, threads=True, started=True) == (5, 8)  # the first round: the loader's
    assert trial_batches(Setting(16, 1), 64, threads=True) == (0, 17)  # threads changed mid-epoch start at once


def test_an_io_bound_loader_reaches_32_workers_within_5_percent_of_an_epoch():
    loader = auto_loader(n=1280 * BATCH)  # 5% of the epoch: 64 batches
    loader._autotune.climb.max_workers = MAX_TUNED_WORKERS
    loader._autotune.measure = model_of(loader)  # 50 batches/s per worker up to the caller's 1000: I/O waits
    it = iter(loader)
    for _ in range(loader._autotune.budget):
        next(it)
    assert loader._autotune.done and loader.num_workers == 32, loader._autotune.climb.history  # 16 was 81%


def test_threads_are_searched_beyond_four_per_cpu():
    threads = StatefulDataLoader(Rows(8), worker_method="thread", num_workers="auto")._autotune.climb.max_workers
    processes = StatefulDataLoader(Rows(8), num_workers="auto")._autotune.climb.max_workers
    assert threads == MAX_TUNED_WORKERS and processes == min(MAX_TUNED_WORKERS, max(8, 4 * os.cpu_count()))


def http_trials(workers: int, depth: int) -> Trial:
    """The trials of the HTTP workload (5 ms a request, 16 per batch) as the tuner measured them at 4 and 16 thread
    workers, and more at 32: throughput still rises, sub-linearly, and the caller waits."""
    rate = {4: 22.0, 16: 50.0, 32: 70.0, 64: 75.0}.get(workers, 60.0)
    return Trial(throughput=rate, wait_share=0.9)


def test_threads_climb_as_far_as_the_budget_lets_their_trials_finish():
    budget = 64  # 5% of an epoch of 1,280 batches
    search = HillClimb(Setting(THREAD_START, 1), MemoryModel(1 << 40), MAX_TUNED_WORKERS, budget=budget)
    spent = 0
    while not search.done:
        spent += sum(trial_batches(search.current, budget, threads=True, started=not search.history))
        assert spent <= budget, search.history  # a trial started was finished within the budget
        s = search.current
        search.observe(http_trials(s.workers, s.depth), left=budget - spent)
    # 4 -> 16 paid; the step of 4 to 64 does not fit the 34 batches left (65), a doubling to 32 does (33)
    assert [s for s, _ in search.history] == [Setting(4, 1), Setting(16, 1), Setting(32, 1)], search.history
    assert search.best == Setting(32, 1)


def first_high(model):
    """``model`` whose first trial measures twice the rate: the epoch's first batches came from a head start."""
    calls = []

    def measured(workers: int, depth: int) -> Trial:
        trial = model(workers, depth)
        calls.append((workers, depth))
        return Trial(2 * trial.throughput, trial.wait_share) if len(calls) == 1 else trial

    return measured


def two_cpus(workers: int, depth: int) -> Trial:
    """A CPU-bound worker stage on 2 CPUs: workers beyond 2 add nothing."""
    return worker_bound(min(workers, 2), depth)


def test_a_first_trial_measured_high_does_not_end_the_search_for_workers():
    search = climb(first_high(two_cpus))
    assert search.best.workers >= 2, search.history  # the best of any setting: one worker runs at half of it
    settings = [s for s, _ in search.history]
    assert settings[:4] == [Setting(1, 1), Setting(4, 1), Setting(1, 1), Setting(16, 1)], settings  # 1 again


def test_workers_that_do_not_pay_leave_the_best_measured_again_once():
    flat = climb(lambda w, d: worker_bound(min(w, 1), d))  # one worker is as fast as any number of them
    settings = [s for s, _ in flat.history]
    assert flat.best.workers == 1, flat.history
    assert settings[:3] == [Setting(1, 1), Setting(4, 1), Setting(1, 1)], settings
    assert settings.count(Setting(1, 1)) == 2 and settings.count(Setting(4, 1)) == 1, settings


def cpu_bound_on_two_cpus(workers: int, depth: int, per_worker: float = 50.0) -> Trial:
    """A CPU-bound pipeline on a 2-CPU machine: two processes are the most that run at once, more only contend
    (each one beyond two costs 15% of the throughput)."""
    rate = min(workers, 2) * per_worker * 0.85 ** max(0, workers - 2)
    return Trial(throughput=rate, wait_share=1.0 - rate / 1000.0)


def test_process_workers_are_searched_by_doubling_so_two_cpus_get_two_processes():
    # steps of 4 went 1 -> 4 (more than 1, so it "paid") -> 16 -> 8 and never tried 2, the best on 2 CPUs
    search = climb(cpu_bound_on_two_cpus, processes=True)
    assert search.best.workers == 2, search.history
    assert [s.workers for s, _ in search.history][:3] == [1, 2, 4], search.history


def pipeline_deliveries(workers: int, depth: int, cost_ms, n: int) -> list[float]:
    """When each of ``n`` batches reaches a caller that takes it at once (ms from the pipeline's start): batch ``i``
    takes ``cost_ms(i)`` on the first worker free, once requested; the first ``workers + depth`` are requested at the
    start, each later one when the batch ``workers + depth`` before it is delivered; delivery is in order."""
    in_flight, free, delivered = workers + depth, [0.0] * workers, []
    for i in range(n):
        requested = 0.0 if i < in_flight else delivered[i - in_flight]
        start = max(requested, heapq.heappop(free))
        heapq.heappush(free, start + cost_ms(i))
        delivered.append(max(start + cost_ms(i), delivered[-1] if delivered else 0.0))
    return delivered


def unequal(i: int) -> float:
    """Batches of unequal cost: one in three takes 50 ms, the others 30 ms."""
    return 30.0 + 20.0 * (i % 3 == 0)


def steady_rate(workers: int, depth: int) -> float:
    """Batches per second of ``pipeline_deliveries`` of ``unequal`` batches, over many rounds."""
    times = pipeline_deliveries(workers, depth, unequal, 3000)
    return 2000 / ((times[-1] - times[999]) / 1e3)


def test_a_trial_is_not_measured_high_by_the_batches_that_arrive_with_its_first(monkeypatch):
    # in-order delivery holds quick batches back until a slow one before them arrives: they come at once, with it.
    # A rate from the trial's first batch on counted those as free: 16 thread workers read 1.56x their steady rate
    loader = auto_loader(n=1280 * BATCH)
    tune, trials = loader._autotune, []

    def measure(_loader, batch, setting, batches, elapsed_ns):
        trials.append((setting, batches * 1e9 / elapsed_ns))
        return Trial(trials[-1][1], 0.9)

    tune.measure = measure
    now = [0.0]  # a synthetic clock (ms): each setting's batches come as pipeline_deliveries says, from its start
    monkeypatch.setattr("torch_drt.loader._autotune.perf_counter_ns", lambda: int(now[0] * 1e6))
    it = iter(loader)  # the loader's pipeline starts at 0
    setting, start, k = tune.setting, 0.0, 0
    while len(trials) < 2:
        now[0] = start + pipeline_deliveries(setting.workers, setting.depth, unequal, k + 1)[k]
        next(it)  # its last batch delivered, a trial applies the next setting: the new pipeline starts then
        setting, start, k = (tune.setting, now[0], 0) if tune.setting != setting else (setting, start, k + 1)
    assert [s for s, _ in trials] == [Setting(THREAD_START, 1), Setting(16, 1)], trials
    for setting, rate in trials:
        steady = steady_rate(setting.workers, setting.depth)
        assert 0.85 * steady <= rate <= 1.1 * steady, (setting, rate, steady)


@pytest.mark.parametrize(("workers", "depth"), [(1, 1), (4, 1), (4, 2), (16, 1), (32, 2)])
def test_a_trial_clock_reads_a_steady_pipelines_rate(workers, depth):
    clock = TrialClock(Setting(workers, depth), 0)
    clock.warmup, clock.length = 1000, 2000  # the first 1000: the pipeline settles
    for t in pipeline_deliveries(workers, depth, unequal, 3000):
        clock.delivered(int(t * 1e6))
    assert clock.ends
    assert clock.length * 1e9 / clock.elapsed_ns == pytest.approx(steady_rate(workers, depth), rel=0.01)
