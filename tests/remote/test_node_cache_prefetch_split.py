"""The node cache's prefetch budget is split among the node's reading processes, whichever way a rank reads.

Two real ranks (gloo, ``LOCAL_WORLD_SIZE=2``: one node) read one cache on moto's S3 server through s3fs and one node
cache: through ``CacheSampler``, by iterating the ``CachedDataset``, through the cache loader, and (an MDS dataset)
through ``torch_drt.StatefulDataLoader``, which plans a ``torch_drt.formats`` reader's reads. Each process's prefetch
window is its share of the node cache's quarter (``RemoteConfig.bytes_ahead`` of the node's processes,
``torch_drt._cpu_budget.node_processes``): before, ``CacheSampler`` and the dataset's iteration gave every process the
whole quarter, as did the formats readers' planned reads, and the cache loader split it among the rank's loading
processes only, so the node's windows added up to twice the quarter. Each rank's window is local once its prefetcher
settles (its share is prefetched), and no shard is downloaded twice across the node.
"""

from __future__ import annotations

import collections
import json
import socket
from pathlib import Path

import pytest
from remote_fixtures import BUCKET, moto_fixture, proxy_fixture, publish_local, unique  # noqa: F401
from remote_servers import upload_tree

import torch_drt as drt

pytestmark = pytest.mark.timeout(300)
ROWS, PAYLOAD, PER_SHARD = 4096, 1000, 64  # 64 shards of 64 rows, about 64 KB each


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _published(path: str, tmp_path: Path, endpoint: str) -> tuple[str, dict[str, int], int]:
    """The dataset ``path`` reads, at a URL on moto: its URL, its shards' sizes (by name under the URL) and a node
    cache limit that makes the node cache's quarter, split between the node's two processes, a few shards each."""
    if path == "formats":  # torch_drt.StatefulDataLoader plans its reads 8 batches (shards) ahead
        from dist_job import write_mds

        name = unique("mds-split")
        write_mds(tmp_path / "mds", 12)
        upload_tree(tmp_path / "mds", endpoint, f"{BUCKET}/{name}")
        sizes = {p.name: p.stat().st_size for p in (tmp_path / "mds").glob("shard.*")}
        return f"s3://{BUCKET}/{name}", sizes, 20 * max(sizes.values())  # 2.5 shards each (5 before)
    runtime = drt.DatasetRuntime(1)  # the cache's readers plan 8 shards ahead at a start
    local, url = publish_local(runtime, tmp_path, endpoint, n=ROWS, payload_bytes=PAYLOAD,
                               max_shard_bytes=PER_SHARD * PAYLOAD)
    runtime.close()
    sizes = {f"shards/{p.name}": p.stat().st_size for p in (local / "shards").iterdir()}
    assert len(sizes) >= 32, sizes
    return url, sizes, 52 * max(sizes.values())  # 6.5 shards each (13 before)


@pytest.mark.parametrize("path", ["sampler", "dataset", "loader", "formats"])
def test_each_processs_window_is_its_share_of_the_node_and_each_shard_comes_once(tmp_path, moto_endpoint, proxy,
                                                                                 path):
    import torch.multiprocessing as mp
    from dist_job import prefetch_window

    url, sizes, limit = _published(path, tmp_path, moto_endpoint)
    proxy.reset()
    out = tmp_path / "windows.json"
    mp.spawn(prefetch_window, args=(2, _port(), str(out), url, proxy.url, str(tmp_path / "node"), limit, path),
             nprocs=2, join=True)
    ranks = json.loads(out.read_text())

    share = drt.RemoteConfig(cache_limit=limit).bytes_ahead(2)  # the node cache's quarter over 2 processes
    assert share == limit // 8
    for rank in ranks:
        assert rank["bound"] == share, (rank["bound"], share)  # before: limit // 4 (twice the share)
        assert len(rank["window"]) >= share // max(sizes.values()) and all(rank["local"]), rank  # its share is local
        assert sum(sizes[name] for name in rank["window"]) <= share
    downloads = collections.Counter()  # whole-shard GETs per shard, across the node
    for full_path, ranges in proxy.ranges.items():
        name = next((rel for rel in sizes if full_path.endswith(f"/{rel}")), None)
        if name is not None:
            downloads[name] += sum(r in ("", f"bytes=0-{sizes[name] - 1}") for r in ranges)
    downloads = +downloads  # (the shards only read by ranges while they downloaded aside)
    assert max(downloads.values()) == 1, downloads  # each shard downloaded once for the node
    assert set(downloads) == {name for rank in ranks for name in rank["window"]}  # and only the windows


def test_a_samplers_read_ahead_is_split_over_the_nodes_ranks(tmp_path, moto_endpoint, monkeypatch):
    """The fast sibling: a ``CacheSampler`` of rank 0 of 4, two of them on this node, plans with a share of 2."""
    from remote_fixtures import remote_config
    from remote_servers import s3_options

    from torch_drt.cache.loader import CacheSampler

    runtime = drt.DatasetRuntime(1)
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=40)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=0), storage_options=s3_options(moto_endpoint),
                                remote_config=remote_config(tmp_path))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert CacheSampler(ds, rank=0, world_size=4)._ahead.share == 2  # before: 1 (the sampler's own process)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert CacheSampler(ds, rank=0, world_size=4)._ahead.share == 4
    runtime.close()
