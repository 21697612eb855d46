"""``CachedDataset.to_torch_dataloader`` as dataset-rt 0.4.8 builds it (issue 13 item 1), each expectation taken
from dataset-rt itself in the same test.

Each case runs dataset-rt's loader and torch_drt's (through ``torch_drt.compat.dataset_rt``) side by side.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import warnings
from pathlib import Path

import pytest

import torch_drt.compat.dataset_rt as drt

dataset_rt = pytest.importorskip("dataset_rt")
N = 40


class Numbered:
    def __init__(self, name: str, n: int) -> None:
        self.name, self.n = name, n

    def __iter__(self):
        for i in range(self.n):
            yield dataset_rt.CacheInput(bytes([i]) * 4, {"i": i})


def ids(batch: list) -> list[int]:
    """A collate function (module level: loading processes pickle it)."""
    return [sample.metadata["i"] for sample in batch]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("loader")
    runtime = dataset_rt.DatasetRuntime(num_workers=1)
    (result,) = runtime.write_cache(
        [Numbered("n", N)], root, writer_config=dataset_rt.WriterConfig(show_progress=False)
    )
    return result.path


@pytest.fixture
def theirs(cache):
    """dataset-rt's dataset: sequential reading with seed 7 (its loader shuffles anyway by default)."""
    config = dataset_rt.ReaderConfig(seed=7, shuffle=False)
    return dataset_rt.DatasetRuntime(num_workers=1).cached_dataset([cache], reader_config=config)


@pytest.fixture
def ours(cache):
    return drt.DatasetRuntime(num_workers=1).cached_dataset(
        [cache], reader_config=drt.ReaderConfig(seed=7, shuffle=False)
    )


def order(loader) -> list[int]:
    return [i for batch in loader for i in batch]


def test_shuffle_true_and_a_random_seed_by_default(theirs, ours):
    sequential = list(range(N))
    assert order(theirs.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, verbose=False)) != sequential
    first = order(ours.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0))
    second = order(ours.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0))
    assert first != sequential  # the dataset's ReaderConfig(shuffle=False, seed=7) does not decide
    assert first != second  # seed="random": drawn per loader


def test_an_explicit_seed_reproduces_and_shuffle_false_reads_in_order(theirs, ours):
    for dataset, extra in ((theirs, {"verbose": False}), (ours, {})):
        make = lambda **kw: dataset.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, **extra, **kw)  # noqa: B023, E731
        assert order(make(shuffle=True, seed=11)) == order(make(shuffle=True, seed=11))
        assert order(make(shuffle=False)) == list(range(N))


def test_the_default_worker_count_is_dataset_rts(theirs, ours, monkeypatch):
    expected, got = [], []
    for cpus in (1, 2, 3, 6, 16):  # dataset-rt: min(4, cpus per local rank - 1), from affinity and cgroup limits
        monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cpus=cpus: set(range(cpus)))
        expected.append(theirs.to_torch_dataloader(collate_fn=ids, verbose=False).num_workers)
        got.append(ours.to_torch_dataloader(collate_fn=ids).num_workers)
    assert got == expected


def test_verbose_reports_the_loaders_settings(theirs, ours, caplog):
    caplog.set_level(logging.INFO)
    order(theirs.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, seed=3))
    assert any(r.name == "dataset_rt.loader" and "seed=3" in r.getMessage() for r in caplog.records)
    caplog.clear()
    order(ours.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, seed=3, verbose=True))
    assert any(r.levelno == logging.INFO and "seed" in r.getMessage() for r in caplog.records)
    caplog.clear()
    order(ours.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, seed=3, verbose=False))
    assert not [r for r in caplog.records if r.name.startswith("torch_drt")]


def test_work_dir_keeps_each_loaders_export(theirs, ours, tmp_path):
    for dataset, extra, root in ((theirs, {"verbose": False}, tmp_path / "theirs"), (ours, {}, tmp_path / "ours")):
        root.mkdir()
        loader = dataset.to_torch_dataloader(collate_fn=ids, num_workers=0, work_dir=root, **extra)
        again = dataset.to_torch_dataloader(collate_fn=ids, num_workers=0, work_dir=root, **extra)
        del loader, again
        exports = sorted(p for p in root.iterdir() if p.is_dir())
        assert len(exports) == 2  # one subdirectory per loader, kept after the loaders are gone
        restored = drt.CachedDataset.from_config(exports[0] / "dataset.json")
        assert restored.get_metadata().equals(ours.get_metadata())
    with pytest.raises(ValueError):
        ours.to_torch_dataloader(collate_fn=ids, num_workers=0, work_dir=tmp_path / "missing")


def test_multiprocessing_context_inherit_is_the_platform_default(theirs, ours):
    theirs_loader = theirs.to_torch_dataloader(
        collate_fn=ids, num_workers=1, multiprocessing_context="inherit", verbose=False
    )
    loader = ours.to_torch_dataloader(collate_fn=ids, num_workers=1, multiprocessing_context="inherit")
    method = multiprocessing.get_context().get_start_method()
    assert theirs_loader.multiprocessing_context.get_start_method() == method
    assert loader.multiprocessing_context.get_start_method() == method


def test_prefetch_factor_auto_is_two_with_workers_and_none_without(theirs, ours):
    for dataset, extra in ((theirs, {"verbose": False}), (ours, {})):
        with_workers = dataset.to_torch_dataloader(collate_fn=ids, num_workers=1, prefetch_factor="auto", **extra)
        without = dataset.to_torch_dataloader(collate_fn=ids, num_workers=0, prefetch_factor="auto", **extra)
        assert (with_workers.prefetch_factor, without.prefetch_factor) == (2, None)


def test_persistent_workers_auto_follows_the_workers(theirs, ours):
    for dataset, extra in ((theirs, {"verbose": False}), (ours, {})):
        with_workers = dataset.to_torch_dataloader(collate_fn=ids, num_workers=1, persistent_workers="auto", **extra)
        without = dataset.to_torch_dataloader(collate_fn=ids, num_workers=0, persistent_workers="auto", **extra)
        assert (with_workers.persistent_workers, without.persistent_workers) == (True, False)


def test_persistent_workers_false_warns_that_epochs_repeat(theirs, ours):
    match = "each epoch repeats the same sample sequence"
    with pytest.warns(UserWarning, match=match):
        theirs.to_torch_dataloader(collate_fn=ids, num_workers=1, persistent_workers=False, verbose=False)
    with pytest.warns(UserWarning, match=match):
        ours.to_torch_dataloader(collate_fn=ids, num_workers=1, persistent_workers=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without workers nothing restarts: no warning
        ours.to_torch_dataloader(collate_fn=ids, num_workers=0, persistent_workers=False)


REFUSED = [
    {"shuffle": 1},
    {"drop_last": 0},
    {"pin_memory": None},
    {"batch_size": True},
    {"batch_size": 2**63},
    {"samples_per_epoch": 1.5},
    {"samples_per_epoch": "10"},
    {"samples_per_epoch": 2**53 + 1},
    {"persistent_workers": True},
    {"persistent_workers": "yes"},
    {"prefetch_factor": 2},
    {"prefetch_factor": None},
    {"shuffle": True, "seed": None},
    {"shuffle": True, "seed": -1},
    {"shuffle": True, "seed": True},
    {"shuffle": True, "seed": 2**64},
    {"timeout": 1},
    {"timeout": float("inf")},
    {"multiprocessing_context": "nope"},
    {"verbose": 1},
    {"batch_size": 0},
    {"samples_per_epoch": 0},
    {"shuffle": False, "seed": 3},
    {"num_workers": None},
    {"num_workers": -1},
    {"num_workers": True},
    {"native_num_workers": 0},
    {"timeout": -1},
    {"worker_partition": "x"},
    {"dataloader_kwargs": {"sampler": 1}},
    {"dataloader_kwargs": {"in_order": False, "shuffle": True}},
]


@pytest.mark.parametrize("kwargs", REFUSED, ids=repr)
def test_argument_validation(theirs, ours, kwargs):
    base = {"collate_fn": ids, "num_workers": 0} | kwargs
    with pytest.raises(ValueError) as expected:
        theirs.to_torch_dataloader(**{"verbose": False} | base)
    with pytest.raises(ValueError) as got:
        ours.to_torch_dataloader(**base)
    assert str(got.value) == str(expected.value)  # dataset-rt's message


def test_an_unpicklable_transform_with_workers_is_a_type_error(theirs, ours):
    local = lambda sample: sample  # noqa: E731
    for dataset, extra in ((theirs, {"verbose": False}), (ours, {})):
        with pytest.raises(TypeError, match="picklable"):
            dataset.to_torch_dataloader(collate_fn=ids, sample_transform_fn=local, num_workers=1, **extra)


def test_collation_receives_a_list_even_with_batch_size_one(theirs, ours):
    seen = []

    def record(batch):
        seen.append(type(batch))
        return batch

    for dataset, extra in ((theirs, {"verbose": False}), (ours, {})):
        order(dataset.to_torch_dataloader(collate_fn=record, batch_size=1, num_workers=0, shuffle=False, **extra))
    assert set(seen) == {list}


def test_torch_drts_own_loader_follows_the_reader_config_and_is_quiet(cache, caplog):
    """``torch_drt.CachedDataset`` keeps its own defaults (documented in migrating.md): the ReaderConfig decides."""
    import torch_drt

    caplog.set_level(logging.INFO)

    def dataset(**config):
        return torch_drt.DatasetRuntime(1).cached_dataset([cache], reader_config=torch_drt.ReaderConfig(**config))

    sequential = dataset(seed=7, shuffle=False)
    assert order(sequential.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0)) == list(range(N))
    shuffled = dataset(seed=7, shuffle=True)
    first = order(shuffled.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0))
    again = order(shuffled.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0))
    explicit = order(shuffled.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, shuffle=True, seed=7))
    assert first == again == explicit != list(range(N))
    # no loader event (the datasets' own "opened" INFO record on torch_drt.cache is not the loader's)
    assert not [r for r in caplog.records if r.name.startswith(("torch_drt.cache.loader", "dataset_rt"))]
    loader = sequential.to_torch_dataloader(collate_fn=ids, num_workers=0)
    assert (loader.shuffle, loader.seed, loader.verbose) == (False, 7, False)
    # the same validation as dataset-rt's otherwise: an explicit seed needs shuffle, None is not a seed
    for kwargs in ({"shuffle": False, "seed": 7}, {"seed": None}):
        with pytest.raises(ValueError, match="seed"):
            shuffled.to_torch_dataloader(collate_fn=ids, num_workers=0, **kwargs)


def events(stderr: str, logger: str) -> list[dict[str, str]]:
    prefix = f"[{logger}] "
    lines = [line[len(prefix) :] for line in stderr.splitlines() if line.startswith(prefix)]
    return [dict(field.split("=", 1) for field in line.split()) for line in lines]


def test_verbose_events_are_printed_from_the_processes_that_load_as_dataset_rt_prints_them(cache):
    """No logging configured: each package prints its events to stderr, the consumers' from the worker process."""
    from script_runner import run_script

    result = run_script(f"""
        import os, sys
        import dataset_rt
        import torch_drt
        import torch_drt.compat.dataset_rt as drt

        for name, mod, extra in (("theirs", dataset_rt, {{}}), ("ours", drt, {{}}),
                                 ("torch_drt", torch_drt, {{"verbose": True}}), ("quiet", torch_drt, {{}})):
            print(f"== {{name}} {{os.getpid()}}", file=sys.stderr, flush=True)
            config = mod.ReaderConfig(seed=7, shuffle=False)
            dataset = mod.DatasetRuntime(num_workers=1).cached_dataset([{str(cache)!r}], reader_config=config)
            loader = dataset.to_torch_dataloader(collate_fn=len, batch_size=8, num_workers=1,
                                                 multiprocessing_context="fork", **extra)
            assert [sum(loader), sum(loader)] == [{N}, {N}]
            del loader
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    sections = {}
    for part in result.stderr.split("== ")[1:]:
        header, _, rest = part.partition("\n")
        name, pid = header.split()
        logger = "torch_drt.cache.loader" if name in ("torch_drt", "quiet") else "dataset_rt.loader"
        sections[name] = (pid, events(rest, logger))
    names = {name: [e["event"] for e in found] for name, (_, found) in sections.items()}
    expected = ["loader_ready", "reader_started", "reader_pass", "reader_pass"]
    assert names == {"theirs": expected, "ours": expected, "torch_drt": expected, "quiet": []}
    for name in ("theirs", "ours", "torch_drt"):
        pid, (ready, *readers) = sections[name]
        assert ready["pid"] == pid and {r["pid"] for r in readers} != {pid}  # consumers report from their worker
        assert {r["worker"] for r in readers} == {"0"} and ready["num_workers"] == "1"
    theirs_keys = set(sections["theirs"][1][0]) - {"worker_seeds"}  # torch_drt's consumers share one seed: streams
    assert theirs_keys | {"streams"} == set(sections["ours"][1][0])
    assert set(sections["theirs"][1][1]) | {"stream"} == set(sections["ours"][1][1])


def test_inherit_a_context_object_and_an_int_prefetch_factor_load_batches(ours):
    reference = order(ours.to_torch_dataloader(collate_fn=ids, batch_size=4, shuffle=False, num_workers=0))
    for context in ("inherit", multiprocessing.get_context("fork")):
        loader = ours.to_torch_dataloader(collate_fn=ids, batch_size=4, shuffle=False, num_workers=2,
                                          multiprocessing_context=context, prefetch_factor=3)
        assert loader.multiprocessing_context.get_start_method() == multiprocessing.get_context().get_start_method()
        assert sorted(order(loader)) == reference == list(range(N))
        loader.close()
