"""A checkpoint of an IterableDataset loader taken with thread workers, resumed with process workers or the other way
round (issue 21 item 6c), is refused with a message naming the worker methods: the streams differ (one stream in
the loader's thread, one stream per worker process), so no resume there can be exact. A map-style dataset resumes
exactly across worker methods."""

from __future__ import annotations

import pytest
import torch

import torch_drt as drt


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(20))

    def __len__(self) -> int:
        return 20


def checkpoint(method: str, dataset) -> dict:
    loader = drt.StatefulDataLoader(dataset, batch_size=2, num_workers=2, worker_method=method,
                                    multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    return loader.state_dict()


@pytest.mark.parametrize(("taken", "resumed"), [("thread", "process"), ("process", "thread")])
def test_an_iterable_datasets_checkpoint_names_the_worker_methods(taken, resumed):
    state = checkpoint(taken, Stream())
    loader = drt.StatefulDataLoader(Stream(), batch_size=2, num_workers=2, worker_method=resumed,
                                    multiprocessing_context="fork")
    with pytest.raises(ValueError, match=rf"taken with worker_method='{taken}'.*worker_method='{resumed}'"):
        loader.load_state_dict(state)


def test_a_map_style_checkpoint_resumes_across_worker_methods():
    data = list(range(20))
    reference = [b.tolist() for b in drt.StatefulDataLoader(data, batch_size=2, shuffle=True, seed=3)]
    loader = drt.StatefulDataLoader(data, batch_size=2, shuffle=True, seed=3, num_workers=2, worker_method="thread")
    it = iter(loader)
    head = [next(it).tolist() for _ in range(3)]
    state = loader.state_dict()
    resumed = drt.StatefulDataLoader(data, batch_size=2, shuffle=True, seed=3, num_workers=2,
                                     worker_method="process", multiprocessing_context="fork")
    resumed.load_state_dict(state)
    assert head + [b.tolist() for b in resumed] == reference
