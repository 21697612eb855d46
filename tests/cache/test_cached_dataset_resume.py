"""CachedDataset.state_dict() counts the samples an iterator delivered (issue 10, docs/concepts.md).

A state taken mid-iteration resumes right after the last sample delivered: the rest of that epoch, then the
epochs an uninterrupted reader would have read.
"""

from __future__ import annotations

import json

import pytest
from conftest import ListSource

import torch_drt as drt


def ids(samples) -> list[int]:
    return [s.sample_id for s in samples]


@pytest.fixture
def cache(runtime, tmp_path):
    (res,) = runtime.write_cache([ListSource("r", 10)], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    return res.path


def load(runtime, cache, shuffle):
    return runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=5, shuffle=shuffle))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("taken", [0, 3, 6, 7])
def test_a_state_taken_mid_iteration_resumes_after_the_delivered_samples(runtime, cache, shuffle, taken):
    reference = load(runtime, cache, shuffle)
    reference.set_epoch_len(7)
    full = [ids(reference), ids(reference), ids(reference)]

    ds = load(runtime, cache, shuffle)
    ds.set_epoch_len(7)
    first = ids(ds)  # epoch 0 whole
    it = iter(ds)
    head = [next(it).sample_id for _ in range(taken)]
    state = json.loads(json.dumps(ds.state_dict()))
    resumed = load(runtime, cache, shuffle)
    resumed.load_state_dict(state)
    if taken < 7:
        rest = ids(resumed)  # the rest of the interrupted epoch ...
        assert first + head + rest == full[0] + full[1]
    assert ids(resumed) == full[2]  # ... then the next one, whole (after a whole epoch: at once)


def test_a_finished_iterator_and_a_fresh_one(runtime, cache):
    ds = load(runtime, cache, False)
    ds.set_epoch_len(4)
    assert ids(ds) == [0, 1, 2, 3]
    assert ds.state_dict()["position"] == 4
    iter(ds)  # created, nothing delivered yet
    resumed = load(runtime, cache, False)
    resumed.load_state_dict(ds.state_dict())
    assert ids(resumed) == [4, 5, 6, 7]
