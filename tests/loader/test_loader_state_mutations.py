"""Every single-field mutation of a StatefulDataLoader state is refused at load_state_dict with a ValueError
naming the field, or resumes the identical stream (issue 22): map-style, IterableDataset (in the loader and in
process workers) and node-backed (CacheSampler) loaders.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ListSource
from state_mutations import check_mutations

import torch_drt as drt
from torch_drt import StatefulDataLoader
from torch_drt.nodes import CacheReaderNode, CacheSampler, WeightedMixer


def checkpoint(loader, batches: int = 1) -> dict:
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return json.loads(json.dumps(loader.state_dict()))


def two_epochs(loader) -> list:
    return list(loader) + list(loader)


def map_loader() -> StatefulDataLoader:
    return StatefulDataLoader(list(range(10)), batch_size=2, shuffle=True, seed=3, collate_fn=list)


def test_map_style_loader_states():
    assert check_mutations(map_loader, checkpoint(map_loader()), two_epochs) > 30  # every field tried


def test_map_style_loader_states_out_of_order():
    def fresh():
        return StatefulDataLoader(list(range(12)), batch_size=2, collate_fn=list, in_order=False)

    state = checkpoint(fresh(), 2) | {"ahead": [6]}  # a batch delivered ahead of an older one
    def in_order(path, what):  # without the batches delivered ahead: the in-order state at the same offset
        return path[0] == "ahead" and what in ("delete", "None", "[]")

    check_mutations(fresh, state, two_epochs, other_valid=in_order)


class Numbers(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(9))


def test_iterable_loader_states():
    def fresh():
        return StatefulDataLoader(Numbers(), batch_size=2, collate_fn=list)

    check_mutations(fresh, checkpoint(fresh(), 2), two_epochs)


def test_iterable_loader_states_of_process_workers():
    def fresh():
        return StatefulDataLoader(Numbers(), batch_size=2, collate_fn=list, num_workers=2, worker_method="process",
                                  multiprocessing_context="fork")

    def fresh_stream(path, what):  # None: the state of a worker whose stream has delivered nothing yet
        return path[0] == "workers" and len(path) == 2 and what == "None"

    def the_datasets_own(path):  # its dataset and iterator states: covered by test_iterable_loader_states
        return "dataset" in path or "iterator" in path

    check_mutations(fresh, checkpoint(fresh(), 3), list, other_valid=fresh_stream, skip=the_datasets_own)


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources(
        [ListSource("st", 10)], tmp_path, reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )


def ids(batch):
    return [s.sample_id for s in batch]


@pytest.mark.parametrize("shuffle", [False, True])
def test_cache_sampler_loader_states(dataset, shuffle):
    def fresh():
        return StatefulDataLoader(CacheReaderNode(CacheSampler(dataset, shuffle=shuffle), dataset), batch_size=4,
                                  collate_fn=ids)

    check_mutations(fresh, checkpoint(fresh()), two_epochs)


def test_cache_sampler_loader_states_at_an_epoch_end(dataset):
    def fresh():
        return StatefulDataLoader(CacheReaderNode(CacheSampler(dataset), dataset), batch_size=5, collate_fn=ids)

    check_mutations(fresh, checkpoint(fresh(), 2), two_epochs)


def test_weighted_mixer_loader_states(dataset):
    def fresh():
        mix = WeightedMixer({"a": CacheSampler(dataset, shuffle=True, seed=1), "b": CacheSampler(dataset)},
                            {"a": 2.0, "b": 1.0}, seed=4)
        return StatefulDataLoader(mix, batch_size=3, collate_fn=list)

    def exhausted_flag(path, what):  # True: another valid state (that source ended once in this epoch)
        return "exhausted" in path and what == "True"

    check_mutations(fresh, checkpoint(fresh(), 2), two_epochs, other_valid=exhausted_flag)


def test_a_versioned_state_without_num_samples_is_refused():
    state = checkpoint(map_loader())
    del state["num_samples"]
    bigger = StatefulDataLoader(list(range(12)), batch_size=2, shuffle=True, seed=3, collate_fn=list)
    with pytest.raises(ValueError, match=r"state\['num_samples'\] is missing"):
        bigger.load_state_dict(state)
