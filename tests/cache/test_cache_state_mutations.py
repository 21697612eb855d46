"""Every single-field mutation of a CachedDataset state and of a cache loader state (to_torch_dataloader) is
refused at load_state_dict with a ValueError naming the field, or resumes the identical stream (issue 22).
"""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import ListSource
from state_mutations import check_mutations

import torch_drt as drt

QUIET = drt.WriterConfig(show_progress=False)


@pytest.fixture
def cache(runtime, tmp_path):
    (res,) = runtime.write_cache([ListSource("m", 40)], tmp_path, writer_config=QUIET)
    return res.path


def ids(samples) -> list[int]:
    return [s.sample_id for s in samples]


@pytest.mark.parametrize("shuffle", [False, True])
def test_cached_dataset_states(runtime, cache, shuffle):
    def fresh():
        return runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=5, shuffle=shuffle))

    ds = fresh()
    head = list(itertools.islice(iter(ds), 7))
    assert len(head) == 7
    state = json.loads(json.dumps(ds.state_dict()))
    def epoch_start(path, what):  # None: a whole epoch comes next (a state taken between epochs)
        return path == ("remaining",) and what == "None"

    check_mutations(fresh, state, lambda d: ids(d) + ids(d), other_valid=epoch_start)


def test_a_state_missing_remaining_is_refused(runtime, cache):
    ds = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    list(itertools.islice(iter(ds), 7))
    state = ds.state_dict()
    del state["remaining"]
    with pytest.raises(ValueError, match=r"state\['remaining'\] is missing"):
        runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False)).load_state_dict(state)


def test_states_of_version_1_still_load(runtime, cache):
    """Version 1 states without ``remaining`` were taken at an epoch's start; later ones hold it."""
    ds = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    list(itertools.islice(iter(ds), 7))
    state = ds.state_dict() | {"version": 1}
    resumed = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    resumed.load_state_dict(state)
    assert ids(resumed) == list(range(7, 40))
    old = {k: v for k, v in state.items() if k != "remaining"} | {"position": 40}
    resumed.load_state_dict(old)
    assert ids(resumed) == list(range(40))


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("l", 24)], tmp_path, reader_config=drt.ReaderConfig(seed=3),
                                      writer_config=QUIET)


def test_cache_loader_states(dataset):
    def fresh():
        return dataset.to_torch_dataloader(sample_transform_fn=lambda s: s.sample_id, collate_fn=list, batch_size=4,
                                           samples_per_epoch=16, seed=9)

    loader = fresh()
    it = iter(loader)
    next(it)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    check_mutations(fresh, state, lambda t: list(t) + list(t))
