"""loader.stats() of a cache at a URL (issue 28): bytes downloaded or read by range, then served by the node cache."""

from __future__ import annotations

import pytest
import torch
from remote_fixtures import (  # noqa: F401
    moto_fixture,
    options,
    proxy_fixture,
    publish_local,
    remote_config,
)

import torch_drt as drt

pytestmark = pytest.mark.timeout(240)


def sample_id(sample) -> torch.Tensor:
    return torch.tensor(sample.sample_id)


@pytest.mark.parametrize("workers", [0, 2])
def test_remote_bytes_are_counted_then_served_by_the_node_cache(runtime, tmp_path, moto_endpoint, proxy, workers):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, payload_bytes=200, max_shard_bytes=4096)
    shards = sum(p.stat().st_size for p in (local / "shards").rglob("*") if p.is_file())
    files = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())  # the index, metadata, manifest too
    remote = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=1), storage_options=options(proxy),
                                    remote_config=remote_config(tmp_path))
    extra = {"num_workers": 2, "multiprocessing_context": "fork"} if workers else {}
    loader = remote.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=20, **extra)
    assert len(torch.cat(list(loader))) == 200
    first = loader.stats().bytes
    fetched = first.get("download", 0) + first.get("range_read", 0)
    assert fetched >= 200 * 200 * 0.9, first  # the payloads came over the network
    assert shards >= 200 * 200, shards
    assert fetched <= 2 * shards + files, first  # each shard at most twice (a read by ranges beside a download)
    assert len(torch.cat(list(loader))) == 200  # the second epoch: from the node cache
    second = loader.stats().bytes
    assert second.get("node_cache_hit", 0) - first.get("node_cache_hit", 0) >= 200 * 200, second
