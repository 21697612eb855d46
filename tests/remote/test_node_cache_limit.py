"""``cache_limit`` is a bound: the node cache's files stay within the limit plus the files being read at the last
eviction (one shard per reading thread, and the index), with 0 and 2 loading workers, 1 and 4 processes; idle maps
and the prefetch window hold nothing over it. A file larger than the limit is a clear error that evicts nothing."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from pathlib import Path

import pytest
import torch
from remote_fixtures import moto_fixture, publish_local  # noqa: F401
from remote_servers import s3_options

import torch_drt as drt
from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(300)


def _sample_id(sample) -> torch.Tensor:
    return torch.tensor(sample.sample_id)


def _load(url: str, opts: dict, cache_dir: str, limit: int, workers: int, seed: int, out) -> None:
    config = drt.RemoteConfig(cache_dir=cache_dir, cache_limit=limit, backoff=0.2, retries=6)
    ds = drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=seed, shuffle=False),
                                              storage_options=opts, remote_config=config)
    loader = ds.to_torch_dataloader(sample_transform_fn=_sample_id, batch_size=8, num_workers=workers,
                                    multiprocessing_context="fork" if workers else None)
    out.put(sorted(torch.cat([b.reshape(-1) for b in loader]).tolist()))


def _usage(directory: Path) -> int:
    """Bytes of the node cache's files (verified files and downloads in progress)."""
    total = 0
    for sub in ("data", "tmp"):
        try:
            with os.scandir(directory / sub) as it:
                for entry in it:
                    with contextlib.suppress(FileNotFoundError):
                        total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            pass
    return total


@pytest.mark.parametrize(
    ("processes", "workers"),  # each count once in the default suite; the other two pairs with `make test-all`
    [(1, 0), pytest.param(1, 2, marks=pytest.mark.slow), pytest.param(4, 0, marks=pytest.mark.slow), (4, 2)],
)
def test_the_node_cache_stays_within_its_limit(runtime, tmp_path, moto_endpoint, processes, workers):
    n = 240
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=n, max_shard_bytes=8192, payload_bytes=600)
    layout = drt.cache.open_cache(local)
    shard = max(s for _, s in layout.shards)
    index = (local / "index.bin").stat().st_size
    metadata = (local / "metadata.arrow").stat().st_size
    assert len(layout.shards) >= 15
    limit = index + metadata + 4 * shard  # the dataset is 15+ shards: constant eviction
    readers = processes * max(workers, 1)  # threads reading at once
    bound = limit + index + readers * 3 * shard  # each holds a shard while it copies out, waits for two at most
    cache_dir = tmp_path / "node"
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _usage(cache_dir))
            stop.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_load, args=(url, s3_options(moto_endpoint), str(cache_dir), limit, workers, seed, out))
             for seed in range(processes)]
    try:
        for p in procs:
            p.start()
        results = [out.get(timeout=240) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
        stop.set()
        watcher.join(10)
    assert all(p.exitcode == 0 for p in procs)
    assert all(ids == list(range(n)) for ids in results)  # every row
    assert peak[0] <= bound, f"the node cache held {peak[0]:,} bytes: over {limit=:,} by more than the reads"
    assert len(os.listdir(cache_dir / "data")) < len(layout.shards)  # it did evict


def _write(data: bytes):
    def download(fd: int) -> None:
        os.pwrite(fd, data, 0)

    return download


def test_a_file_larger_than_the_limit_is_a_clear_error_that_evicts_nothing(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=3000)
    for key in ("sha256-a", "sha256-b"):
        cache.fetch(key, 1000, _write(b"x" * 1000), lambda path: None, key)
    free_before = os.statvfs(tmp_path).f_bavail
    for size in (3001, 1 << 40):  # one shard too large, and a hostile manifest's size
        with pytest.raises(ValueError, match=r"more than the node cache's limit of 3,000 bytes") as info:
            cache.fetch("sha256-big", size, _write(b"y"), lambda path: None, "s3://bucket/cache/shards/big.bin")
        assert "cache_limit" in str(info.value) and f"{size:,}" in str(info.value)
    assert sorted(os.listdir(tmp_path / "n" / "data")) == ["sha256-a", "sha256-b"]  # nothing evicted
    assert os.listdir(tmp_path / "n" / "tmp") == []  # nothing reserved
    assert os.statvfs(tmp_path).f_bavail >= free_before - 256  # no space grabbed (a few blocks of noise)
    with pytest.raises(ValueError, match="more than the node cache's limit"):  # a file of unknown size, too
        cache.fetch("sha256-c", None, _write(b"z" * 3001), lambda path: None, "s3://bucket/cache/index.bin")
    assert sorted(os.listdir(tmp_path / "n" / "data")) == ["sha256-a", "sha256-b"]
    assert os.listdir(tmp_path / "n" / "tmp") == []
