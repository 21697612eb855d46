"""The cache loader behaves as ``torch_drt.StatefulDataLoader`` does (issue 21 item 6): loading processes start with
torch's default start method, a checkpoint resumes exactly under another ``num_workers`` (one stream per rank, its
batches dealt to the workers in turn), and checkpoints of earlier versions load or are refused saying what changed.
"""

from __future__ import annotations

import multiprocessing

import pytest
from conftest import QUIET, ListSource

import torch_drt as drt

N = 45


def sample_id(sample) -> int:
    return sample.sample_id


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("r", N)], tmp_path / "caches", reader_config=drt.ReaderConfig(seed=3),
                                      writer_config=QUIET)


def rows(batches) -> list[int]:
    return [x for batch in batches for x in batch]


def take(loader, n: int) -> list[list[int]]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


SETTINGS = {
    "permutation": dict(shuffle=True, seed=9),
    "weighted": dict(shuffle=True, seed=9, sampling="weighted"),
    "sequential": dict(shuffle=False),
    "shard_window": dict(shuffle=True, seed=9, shard_window=2),
    "split": dict(shuffle=True, seed=9, worker_partition="split"),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_a_resume_under_another_num_workers_reads_what_an_uninterrupted_run_reads(dataset, name):
    def make(workers: int):
        return dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=4,
                                           samples_per_epoch=30, num_workers=workers, **SETTINGS[name])

    reference = make(0)
    expected = rows(reference) + rows(reference)  # two epochs, uninterrupted, inline
    first = make(0)
    got = rows(take(first, 3))
    second = make(2)  # 0 -> 2 workers mid-epoch 0
    second.load_state_dict(first.state_dict())
    got += rows(second)  # the rest of epoch 0
    got += rows(take(second, 2))  # two batches of epoch 1
    third = make(1)  # 2 -> 1 worker mid-epoch 1
    third.load_state_dict(second.state_dict())
    got += rows(third)
    assert got == expected


def test_the_default_start_method_is_torchs(dataset):
    loader = dataset.to_torch_dataloader(collate_fn=list, num_workers=1)
    assert loader.multiprocessing_context.get_start_method() == multiprocessing.get_context().get_start_method()
    for method in ("spawn", "fork", "forkserver", "inherit"):
        chosen = dataset.to_torch_dataloader(collate_fn=list, num_workers=1, multiprocessing_context=method)
        expected = multiprocessing.get_context(None if method == "inherit" else method).get_start_method()
        assert chosen.multiprocessing_context.get_start_method() == expected


def test_forked_workers_take_functions_that_do_not_pickle(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=lambda s: s.sample_id, collate_fn=list, batch_size=4,
                                         num_workers=2, multiprocessing_context="fork")  # inherited, as torch's are
    assert sorted(rows(loader)) == list(range(N))
    with pytest.raises(TypeError, match="must be picklable"):
        dataset.to_torch_dataloader(sample_transform_fn=lambda s: s.sample_id, num_workers=2,
                                    multiprocessing_context="spawn")


def test_a_resume_switches_between_inline_loading_and_worker_processes(dataset):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, seed=9)
    expected = rows(dataset.to_torch_dataloader(num_workers=0, **kwargs))
    processes = dataset.to_torch_dataloader(num_workers=2, multiprocessing_context="fork", **kwargs)
    got = rows(take(processes, 4))
    inline = dataset.to_torch_dataloader(num_workers=0, **kwargs)  # the loader's own thread
    inline.load_state_dict(processes.state_dict())
    assert got + rows(inline) == expected


def old_state(state: dict, **changes) -> dict:
    """``state`` as a loader of the version before issue 21 wrote it (no sampling, streams or continue_streams)."""
    old = {k: v for k, v in state.items() if k not in ("sampling", "streams", "continue_streams")}
    return {**old, **changes}


def test_a_weighted_checkpoint_of_the_previous_version_resumes_with_sampling_weighted(dataset):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, seed=9, num_workers=0)
    reference = rows(dataset.to_torch_dataloader(sampling="weighted", **kwargs))
    loader = dataset.to_torch_dataloader(sampling="weighted", **kwargs)
    head = rows(take(loader, 3))
    state = old_state(loader.state_dict())  # then shuffle=True meant these draws
    resumed = dataset.to_torch_dataloader(sampling="weighted", **kwargs)
    resumed.load_state_dict(state)
    assert head + rows(resumed) == reference
    with pytest.raises(ValueError, match=r"draws by weight with replacement.*pass sampling='weighted'"):
        dataset.to_torch_dataloader(**kwargs).load_state_dict(state)


def test_a_per_worker_checkpoint_of_the_previous_version_is_refused_saying_why(dataset):
    loader = dataset.to_torch_dataloader(collate_fn=list, batch_size=4, seed=9, num_workers=0, sampling="weighted")
    state = old_state(loader.state_dict(), num_workers=2)
    with pytest.raises(ValueError, match=r"num_workers=2.*own stream"):
        dataset.to_torch_dataloader(collate_fn=list, batch_size=4, seed=9, num_workers=2,
                                    sampling="weighted").load_state_dict(state)


def test_persistent_workers_false_is_part_of_the_checkpoint(dataset):
    kwargs = dict(collate_fn=list, batch_size=4, seed=9, num_workers=1, multiprocessing_context="fork")
    loader = dataset.to_torch_dataloader(**kwargs)
    with pytest.warns(UserWarning, match="repeats"):
        restarting = dataset.to_torch_dataloader(persistent_workers=False, **kwargs)
    with pytest.raises(ValueError, match="continue_streams"):
        restarting.load_state_dict(loader.state_dict())
