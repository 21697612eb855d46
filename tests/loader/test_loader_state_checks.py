"""StatefulDataLoader.load_state_dict refuses states that do not describe this loader (issue 10).

Map-style and node-backed loaders: another dataset size, offsets past the end or of the wrong type, unknown
versions, absurd epochs and negative node positions are refused with a ValueError naming the field; states that
do fit still resume exactly.
"""

from __future__ import annotations

import copy
import json

import pytest
from conftest import ListSource

import torch_drt as drt
from torch_drt import StatefulDataLoader
from torch_drt.nodes import CacheReaderNode, CacheSampler


def loader(n: int = 10, **kwargs) -> StatefulDataLoader:
    return StatefulDataLoader(list(range(n)), batch_size=2, collate_fn=list, **kwargs)


def state_after_one_batch(**kwargs) -> dict:
    first = loader(**kwargs)
    it = iter(first)
    next(it)
    return first.state_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_samples": 20}, "num_samples"),
        ({"observation_offset": 100}, "observation_offset"),
        ({"observation_offset": 11}, "observation_offset"),
        ({"observation_offset": -2}, "observation_offset"),
        ({"observation_offset": 2.5}, "observation_offset"),
        ({"observation_offset": 2.0}, "observation_offset"),
        ({"observation_offset": "4"}, "observation_offset"),
        ({"observation_offset": True}, "observation_offset"),
        ({"epoch": False}, "epoch"),
        ({"epoch": 10**30}, "epoch"),
        ({"epoch": -1}, "epoch"),
        ({"version": 99}, "version"),
        ({"version": "1"}, "version"),
        ({"shuffle_seed": "7"}, "shuffle_seed"),
    ],
)
def test_a_state_that_does_not_fit_is_refused(change, message):
    state = {**state_after_one_batch(), **change}
    with pytest.raises(ValueError, match=message):
        loader().load_state_dict(state)


@pytest.mark.parametrize("state", [None, [], "state", {}, {"epoch": 0}])
def test_a_state_that_is_not_a_loader_state_is_refused(state):
    with pytest.raises(ValueError, match="state"):
        loader().load_state_dict(state)


def test_states_that_fit_still_resume():
    state = state_after_one_batch()
    resumed = loader()
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert list(resumed) == [[2, 3], [4, 5], [6, 7], [8, 9]]
    at_end = loader()
    at_end.load_state_dict({**state, "observation_offset": 10})  # the very end of epoch 0
    assert list(at_end) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert at_end.state_dict()["epoch"] == 2
    minimal = loader()
    minimal.load_state_dict({"epoch": 3, "observation_offset": 4})  # older, minimal states still load
    assert next(iter(minimal)) == [4, 5] and minimal.state_dict()["epoch"] == 3


def test_a_sampler_state_must_match_the_sampler_length():
    state = state_after_one_batch(sampler=[9, 0, 3, 4])
    with pytest.raises(ValueError, match="num_samples"):
        loader(sampler=[9, 0, 3]).load_state_dict(state)


# -- node-backed loaders --------------------------------------------------------------------------------------


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources(
        [ListSource("st", 10)],
        tmp_path,
        reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )


def ids(batch):
    return [s.sample_id for s in batch]


def node_loader(dataset) -> StatefulDataLoader:
    return StatefulDataLoader(CacheReaderNode(CacheSampler(dataset, shuffle=False), dataset), batch_size=4,
                              collate_fn=ids)


def node_state(dataset) -> dict:
    first = node_loader(dataset)
    it = iter(first)
    next(it)
    return json.loads(json.dumps(first.state_dict()))


def _set(state: dict, path: tuple[str, ...], value) -> dict:
    state = copy.deepcopy(state)
    target = state
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return state


SAMPLER = ("node_state", "source", "source")  # batcher -> reader -> sampler


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ((*SAMPLER, "yielded"), -5, "yielded"),
        ((*SAMPLER, "yielded"), 11, "yielded"),
        ((*SAMPLER, "position"), -3, "position"),
        ((*SAMPLER, "position"), 1.5, "position"),
        (("node_state", "position"), -7, "position"),
        (("node_state", "position"), "4", "position"),
        (("epoch",), -1, "epoch"),
        (("version",), 7, "version"),
    ],
)
def test_node_states_with_negative_or_foreign_values_are_refused(dataset, path, value, message):
    state = _set(node_state(dataset), path, value)
    resumed = node_loader(dataset)
    with pytest.raises(ValueError, match=message):
        resumed.load_state_dict(state)
        next(iter(resumed))


@pytest.mark.parametrize("state", [None, {}, {"epoch": 0}, {"epoch": 0, "node_state": 5}])
def test_an_empty_node_state_is_refused(dataset, state):
    with pytest.raises(ValueError, match="state"):
        node_loader(dataset).load_state_dict(state)


def test_a_node_state_that_fits_resumes(dataset):
    resumed = node_loader(dataset)
    resumed.load_state_dict(node_state(dataset))
    assert list(resumed) == [[4, 5, 6, 7], [8, 9]]
