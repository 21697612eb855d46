"""``to_torch_dataloader(num_workers="tune")`` (issue 28): the cache loader's loading processes and batches ahead,
searched by the loader autotuner, kept in the checkpoint, bounded by ``autotune_memory_cap``.

``num_workers="auto"`` keeps dataset-rt's meaning (its CPU budget); the search is ``"tune"``. Throughput is a cost
model reading the setting the pipeline really runs (its mapper's processes and batches in flight), so the choices
are deterministic; the processes, the rows and (in the cap test) the memory measured are real.
"""

from __future__ import annotations

import gc
import os
import threading

import pytest
import torch
from conftest import QUIET, ListSource

import torch_drt as drt
import torch_drt.compat.dataset_rt as compat
from torch_drt._cpu_budget import available_cpus
from torch_drt.loader._autotune import STATE_KEY
from torch_drt.loader._memory import worker_bytes
from torch_drt.loader._tuner import MemoryModel, Setting, Trial

N = 240
SEED = dict(shuffle=True, seed=11)


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("r", N)], tmp_path / "caches", reader_config=drt.ReaderConfig(seed=3),
                                      writer_config=QUIET)


def ids(batch) -> list[int]:
    return batch["ids"]


def collate(samples) -> dict:
    return {"ids": [s.sample_id for s in samples], "pid": os.getpid()}


def big_collate(samples) -> dict:  # a batch of 4 MiB: the memory model has something to bound
    return {"ids": [s.sample_id for s in samples], "x": torch.zeros(1 << 19, dtype=torch.int64)}


def reader_collate(samples) -> dict:  # run in the loading process: the reader threads it reads with
    readers = [t for t in threading.enumerate() if t.name.startswith("torch_drt-reader")]
    return {"ids": [s.sample_id for s in samples], "readers": len(readers)}


def make(dataset, **kwargs):
    kwargs = dict(batch_size=2, collate_fn=collate, multiprocessing_context="fork", **SEED) | kwargs
    return dataset.to_torch_dataloader(**kwargs)


def rows(batches) -> list[int]:
    return [i for b in batches for i in ids(b)]


def cost_model(loader, seen: list | None = None, real: bool = False):
    """A ``measure``: more processes pay (50 batches/s each, the caller takes 1000/s); batches ahead barely do.
    ``real``: the memory is what the real trial measured (the batch's bytes, the processes' ``worker_bytes``)."""
    measured = loader._autotune._measured

    def measure(_loader, batch, setting, batches, elapsed_ns):
        mapper = loader._mode.mapper
        workers, depth = mapper.num_workers, mapper.in_flight - mapper.num_workers
        if seen is not None:
            seen.append(Setting(workers, depth))
        rate = min(1000.0, workers * 50.0 * (1 + 0.02 * min(depth, 4)))
        memory = measured(_loader, batch, setting, batches, elapsed_ns) if real else Trial(0, 0)
        return Trial(rate, 1 - rate / 1000.0, memory.batch_bytes, memory.worker_bytes)

    return measure


def test_tune_chooses_processes_keeps_the_rows_and_a_resume_runs_the_choice(dataset):
    expected = rows(make(dataset, num_workers=0))
    loader = make(dataset, num_workers="tune")
    assert (loader.num_workers, loader.prefetch_depth, loader.in_flight) == (1, 1, 2)
    loader._autotune.climb.max_workers = 4
    loader._autotune.measure = cost_model(loader)
    it = iter(loader)
    head = [next(it) for _ in range(70)]
    assert loader._autotune.done, loader._autotune.climb.history
    state = loader.state_dict()
    chosen = state[STATE_KEY]
    assert chosen["done"] is True and chosen["num_workers"] == 4, loader._autotune.climb.history
    assert loader._mode.mapper.num_workers == loader.num_workers == 4
    pids = set(loader.worker_pids())
    assert len(pids) == 4  # real processes, restarted at the chosen count
    tail = list(it)
    assert rows(head + tail) == expected  # the rank's stream is dealt to any number: nothing lost or repeated
    # the batches are dealt to all four (read from the batches: the statistics time one batch in `every`, so a
    # worker may have no timed batch of its own)
    assert {b["pid"] for b in tail} == pids

    resumed = make(dataset, num_workers="tune")
    resumed._autotune.measure = no_search
    resumed.load_state_dict(state)
    assert (resumed.num_workers, resumed.prefetch_depth) == (chosen["num_workers"], chosen["prefetch_depth"])
    assert rows(resumed) == expected[70 * 2:]
    again = resumed.state_dict()[STATE_KEY]
    assert resumed._mode.mapper.num_workers == 4 and again["num_workers"] == 4 and again["done"] is True


def test_the_chosen_setting_runs_on_the_loading_processes_it_was_measured_with(dataset):
    loader = make(dataset, num_workers="tune")
    loader._autotune.climb.max_workers = 4
    model, runs = cost_model(loader), []

    def measure(*args):
        mapper = loader._mode.mapper
        runs.append((mapper.num_workers, mapper.in_flight, frozenset(mapper.worker_pids())))
        return model(*args)

    loader._autotune.measure = measure
    it = iter(loader)
    for _ in range(70):
        next(it)
    assert loader._autotune.done and loader.num_workers == 4
    four = [(in_flight, pids) for workers, in_flight, pids in runs if workers == 4]
    assert [in_flight for in_flight, _ in four] == [8], runs  # 4 processes, one batch queued behind each
    assert four[0][1] == set(loader.worker_pids()), runs  # no depth trial: the processes measured run the choice


def test_a_fixed_loader_resumes_a_tuned_checkpoint_under_its_own_workers(dataset):
    expected = rows(make(dataset, num_workers=0))
    loader = make(dataset, num_workers="tune")
    loader._autotune.measure = cost_model(loader)
    it = iter(loader)
    head = [next(it) for _ in range(30)]
    fixed = make(dataset, num_workers=2)
    fixed.load_state_dict(loader.state_dict())
    assert rows(head + list(fixed)) == expected and fixed.num_workers == 2


def small_collate(samples) -> dict:  # 32 KiB: under the transport's ring, so a process's memory stays steady
    return {"ids": [s.sample_id for s in samples], "x": torch.zeros(1 << 12, dtype=torch.int64)}


def two_fit(dataset) -> int:
    """A cap that two loading processes of ``small_collate`` fit and three do not: two and a half times what one
    forked loading process holds here (``worker_bytes``; the batches in flight add 32 KiB each)."""
    probe = make(dataset, num_workers=1, collate_fn=small_collate)
    it = iter(probe)
    next(it), next(it)
    (pid,) = probe.worker_pids()
    worker = worker_bytes(pid)
    probe.close()
    return 5 * worker // 2


def uninterrupted(dataset) -> list[int]:
    """The rows of an epoch, read by a loading process: the parent allocates no more than a tuned loader's (what it
    frees later would turn private in the processes it forks, and count against the cap)."""
    out = rows(make(dataset, num_workers=1))
    gc.collect()
    return out


def no_search(*args):
    raise AssertionError("a resumed loader searched again")


def test_the_memory_cap_bounds_the_real_processes(dataset):
    one = (1 << 19) * 8  # bytes of a batch's tensor
    gc.collect()
    probe = make(dataset, num_workers=1, collate_fn=big_collate)
    it = iter(probe)
    next(it), next(it)
    (pid,) = probe.worker_pids()
    worker = worker_bytes(pid)  # what one forked loading process holds here, or may come to own of its parent's
    probe.close()
    cap = 5 * worker // 2 + 8 * one  # two processes fit, three (3 * worker + 10 batches) do not: half a process apart
    loader = make(dataset, num_workers="tune", collate_fn=big_collate, autotune_memory_cap=cap)
    loader._autotune.climb.max_workers = 4
    seen: list = []
    loader._autotune.measure = cost_model(loader, seen, real=True)
    assert sorted(rows(loader)) == list(range(N))
    state = loader.state_dict()[STATE_KEY]
    assert state["done"] and state["memory_cap"] == cap
    assert state["batch_bytes"] >= one and state["worker_bytes"] >= worker // 2  # measured on the real processes
    model = MemoryModel(cap, True, state["batch_bytes"], state["worker_bytes"])
    chosen = Setting(state["num_workers"], state["prefetch_depth"])
    # the cost model always prefers more processes, so the cap, not the cost, bound it
    assert 1 <= chosen.workers <= 2 and model.fits(chosen), (chosen, seen, state)
    assert not model.fits(Setting(3, 1))
    assert all(model.fits(s) for s in seen[1:]), seen  # every setting run after the first trial fits the cap
    history = loader._autotune.climb.history
    for setting, trial in history[1:]:  # and the real processes of each held what their trial measured within it
        assert MemoryModel(cap, True, trial.batch_bytes, trial.worker_bytes).fits(setting), (history, cap)


def test_a_resume_without_a_cap_searches_on_under_the_checkpoints_cap(dataset):
    expected = uninterrupted(dataset)
    cap = two_fit(dataset)
    loader = make(dataset, num_workers="tune", collate_fn=small_collate, autotune_memory_cap=cap)
    loader._autotune.climb.max_workers = 4
    loader._autotune.measure = cost_model(loader, real=True)
    it = iter(loader)
    head = [next(it) for _ in range(12)]  # the first trial (2 batches warm-up, 8 measured) is over: 2 processes
    state = loader.state_dict()
    saved = state[STATE_KEY]
    assert not saved["done"] and saved["num_workers"] == 2 and saved["memory_cap"] == cap and saved["worker_bytes"], (
        cap, loader._autotune.climb.history)
    loader.close()

    resumed = make(dataset, num_workers="tune", collate_fn=small_collate)  # no cap given: the checkpoint's holds
    resumed._autotune.climb.max_workers = 4
    seen: list = []
    resumed._autotune.measure = cost_model(resumed, seen, real=True)
    resumed.load_state_dict(state)
    assert rows(head + list(resumed)) == expected
    final = resumed.state_dict()[STATE_KEY]
    model = MemoryModel(cap, True, final["batch_bytes"], final["worker_bytes"])
    assert final["done"] and final["memory_cap"] == cap, final
    assert seen and all(model.fits(s) for s in seen), (seen, final)  # the resumed search ran on real processes
    assert model.fits(Setting(final["num_workers"], final["prefetch_depth"])) and not model.fits(Setting(4, 1))


def test_a_resume_under_a_smaller_cap_runs_the_checkpoints_choice_shrunk_to_fit(dataset):
    expected = uninterrupted(dataset)
    cap = two_fit(dataset)
    loader = make(dataset, num_workers="tune", collate_fn=small_collate)  # half the memory available: four fit
    loader._autotune.climb.max_workers = 4
    loader._autotune.measure = cost_model(loader, real=True)
    it = iter(loader)
    head = [next(it) for _ in range(70)]
    state = loader.state_dict()
    saved = state[STATE_KEY]
    assert saved["done"] and saved["num_workers"] == 4, loader._autotune.climb.history
    loader.close()

    resumed = make(dataset, num_workers="tune", collate_fn=small_collate, autotune_memory_cap=cap)
    resumed._autotune.measure = no_search
    with pytest.warns(UserWarning, match=r"num_workers=4, prefetch_depth=\d+ hold about .* over autotune_memory_cap"):
        resumed.load_state_dict(state)
    it = iter(resumed)
    tail = [next(it)]
    chosen = resumed.state_dict()[STATE_KEY]
    assert len(resumed.worker_pids()) == chosen["num_workers"] < 4  # the real processes, restarted within the cap
    assert rows(head + tail + list(it)) == expected
    model = MemoryModel(cap, True, saved["batch_bytes"], saved["worker_bytes"])
    assert chosen["done"] and chosen["memory_cap"] == cap
    assert model.fits(Setting(chosen["num_workers"], chosen["prefetch_depth"])), chosen


@pytest.fixture
def two_cpus():
    """This thread, and the processes it forks, on two CPUs: ``native_num_workers="auto"`` then differs for one
    loading process (2 reader threads) and for four (1: no reader pool)."""
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("needs two CPUs")
    os.sched_setaffinity(0, sorted(before)[:2])
    try:
        if available_cpus() != 2:
            pytest.skip("a container limit below two CPUs")
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_auto_reader_threads_follow_the_processes_the_tuner_runs(dataset, two_cpus):
    def readers(loader) -> set[int]:
        return {b["readers"] for b in loader}

    one = readers(make(dataset, num_workers=1, collate_fn=reader_collate))
    four = readers(make(dataset, num_workers=4, collate_fn=reader_collate))
    assert (one, four) == ({2}, {0})  # dataset-rt's budget, min(4, cpus // processes): 2 threads, then 1 (no pool)
    loader = make(dataset, num_workers="tune", collate_fn=reader_collate)
    loader._autotune.climb.max_workers = 4
    loader._autotune.measure = cost_model(loader)
    it = iter(loader)
    head = [next(it) for _ in range(70)]
    assert loader._autotune.done and loader.num_workers == 4, loader._autotune.climb.history
    assert head[0]["readers"] == 2 and readers(it) == four  # each process count reads as a fixed one does
    assert loader.native_num_workers == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": "tune", "prefetch_factor": 2}, "leave prefetch_factor='auto', not 2"),
        ({"num_workers": 2, "autotune_memory_cap": 1 << 20}, "bounds num_workers='tune': give one"),
        ({"num_workers": "tune", "autotune_memory_cap": 0}, "autotune_memory_cap=0 must be an int > 0"),
        ({"num_workers": "many"}, "num_workers must be 'auto' or an integer"),
    ],
)
def test_arguments_are_checked_up_front(dataset, kwargs, message):
    with pytest.raises(ValueError, match=message):
        dataset.to_torch_dataloader(**kwargs)


def test_auto_keeps_dataset_rts_meaning_and_compat_refuses_tune_as_dataset_rt_does(dataset, tmp_path):
    assert dataset.to_torch_dataloader().__dict__.get("_autotune") is None  # "auto": dataset-rt's CPU budget
    (result,) = compat.DatasetRuntime(num_workers=1).write_cache(ListSource("c", 8), tmp_path / "compat",
                                                                  writer_config=compat.WriterConfig(show_progress=False))
    theirs = compat.DatasetRuntime(num_workers=1).cached_dataset(result.path, reader_config=compat.ReaderConfig(seed=1))
    with pytest.raises(ValueError, match=r"^num_workers must be 'auto' or an integer between 0 and"):
        theirs.to_torch_dataloader(num_workers="tune")
