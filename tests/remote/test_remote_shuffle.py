"""``shuffle=True`` over a cache at a URL (issue 21 items 5 and 6): every row once per epoch in a new seeded order,
with the locality-aware shard-window permutation when a window is configured and the plain keyed permutation
otherwise, inline and in loading processes started with the platform's default method (forked on Linux), and a
checkpoint resumes under another number of loading workers."""

from __future__ import annotations

import pytest
import torch
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt

pytestmark = pytest.mark.timeout(240)
N = 300


def sample_id(sample) -> torch.Tensor:
    return torch.tensor(sample.sample_id)


def epoch(loader) -> list[int]:
    return torch.cat([b.reshape(-1) for b in loader]).tolist()


@pytest.mark.parametrize("window", [None, 2])
def test_a_remote_cache_reads_every_row_once_per_epoch(runtime, tmp_path, moto_endpoint, proxy, window):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=N)
    dataset = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=4, shard_window=window),
                                     storage_options=options(proxy), remote_config=remote_config(tmp_path))
    orders = []
    for workers in (0, 2):
        loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=32, num_workers=workers)
        first, second = epoch(loader), epoch(loader)
        assert sorted(first) == sorted(second) == list(range(N)) and first != second
        orders.append((first, second))
    assert orders[0] == orders[1]  # the workers do not change the order
    own = [s.sample_id for s in dataset]  # the dataset's own iteration
    assert sorted(own) == list(range(N))


def test_a_remote_checkpoint_resumes_under_another_num_workers(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=N)
    dataset = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=4), storage_options=options(proxy),
                                     remote_config=remote_config(tmp_path))
    kwargs = dict(sample_transform_fn=sample_id, batch_size=32)
    expected = epoch(dataset.to_torch_dataloader(num_workers=0, **kwargs))
    loader = dataset.to_torch_dataloader(num_workers=2, **kwargs)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(3)]
    resumed = dataset.to_torch_dataloader(num_workers=1, **kwargs)
    resumed.load_state_dict(loader.state_dict())
    assert [x for b in head for x in b] + epoch(resumed) == expected
