"""StatefulDataLoader over torch_drt's nodes: their order, batching, workers and resume."""

from __future__ import annotations

import json

import pytest
from conftest import ListSource, payload

import torch_drt as drt
from torch_drt import StatefulDataLoader
from torch_drt.nodes import CacheReaderNode, CacheSampler


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources(
        [ListSource("ln", 30)],
        tmp_path,
        reader_config=drt.ReaderConfig(seed=4),
        writer_config=drt.WriterConfig(show_progress=False),
    )


def ids(samples):
    return [s.sample_id for s in samples]


def node(dataset, **kw):
    return CacheReaderNode(CacheSampler(dataset, **kw), dataset)


def test_batches_in_the_nodes_order(dataset):
    loader = StatefulDataLoader(node(dataset, shuffle=False), batch_size=8, collate_fn=ids, num_workers=2)
    assert list(loader) == [list(range(k, min(k + 8, 30))) for k in range(0, 30, 8)]
    assert len(loader) == 4
    first = next(iter(loader))
    assert first == list(range(0, 8))  # the sampler's stream continues: epoch 2 starts at the table's start again


def test_transform_gets_positions_and_data(dataset):
    loader = StatefulDataLoader(
        node(dataset, shuffle=False, num_samples=6),
        batch_size=4,
        transform=lambda i, s: (i, s.data),
        collate_fn=list,
        return_indices=True,
    )
    (b1, i1), (b2, i2) = list(loader)
    assert [i for i, _ in b2] == [4, 5]
    assert i1 == [0, 1, 2, 3] and i2 == [4, 5]
    assert b1[1] == (1, payload(1))


@pytest.mark.parametrize(
    ("before", "after"), [({"num_workers": 0}, {"num_workers": 2}), ({"num_workers": 2}, {"num_workers": 0})]
)
def test_resume_mid_epoch_with_another_batch_size_and_workers(dataset, before, after):
    reference = StatefulDataLoader(node(dataset, shuffle=True, seed=2), batch_size=3, collate_fn=ids)
    expected = [x for b in reference for x in b] + [x for b in reference for x in b]
    loader = StatefulDataLoader(node(dataset, shuffle=True, seed=2), batch_size=3, collate_fn=ids, **before)
    it = iter(loader)
    head = [x for _ in range(4) for x in next(it)]
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = StatefulDataLoader(node(dataset, shuffle=True, seed=2), batch_size=5, collate_fn=ids, **after)
    resumed.load_state_dict(state)
    rest = [x for b in resumed for x in b] + [x for b in resumed for x in b]
    assert head + rest == expected


def test_node_mode_validation(dataset):
    with pytest.raises(ValueError, match="a node yields its own order"):
        StatefulDataLoader(node(dataset), shuffle=True)
    with pytest.raises(TypeError, match="or a torchdata node"):
        StatefulDataLoader(object())
