"""Loading from caches at URLs: the loaders return exactly what they return locally, every loader path (dataset
iteration, the cache loader's row fetcher, the CacheSampler node) prefetches the shards of its next batches within
bounds, resume on another node's empty cache without a replay, and with the locality-aware shuffle a half-size
node cache keeps the second epoch's downloads near half the dataset."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from remote_fixtures import (  # noqa: F401
    moto_fixture,
    options,
    proxy_fixture,
    publish_local,
    remote_config,
    wait_idle,
)

import torch_drt as drt
import torch_drt.compat.dataset_rt as compat
from torch_drt.cache import open_cache
from torch_drt.nodes import CacheReaderNode, CacheSampler

pytestmark = pytest.mark.timeout(240)


def sample_id(sample) -> torch.Tensor:
    return torch.tensor(sample.sample_id)


def payload(sample) -> torch.Tensor:
    return torch.tensor([*list(sample.data[:4]), sample.sample_id])


def _ids(loader) -> list[int]:
    return torch.cat([b.reshape(-1) for b in loader]).tolist()


@pytest.mark.parametrize("window", [None, 2])
def test_the_cache_loader_over_s3_matches_the_local_cache(runtime, tmp_path, moto_endpoint, proxy, window):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=500)
    reader = drt.ReaderConfig(seed=4, shard_window=window)
    remote = runtime.cached_dataset(url, reader_config=reader, storage_options=options(proxy),
                                    remote_config=remote_config(tmp_path))
    mine = runtime.cached_dataset(local, reader_config=reader)
    for workers in (0, 2) if window else (0,):  # loading processes: once is enough
        kwargs = dict(sample_transform_fn=payload, batch_size=32, num_workers=workers)
        got = [b.tolist() for b in remote.to_torch_dataloader(**kwargs)]
        assert got == [b.tolist() for b in mine.to_torch_dataloader(**kwargs)]
        if window is not None:  # the locality shuffle is exact: every row once
            assert sorted(row[-1] for batch in got for row in batch) == list(range(500))


def test_forked_loading_workers_make_their_own_store_clients(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=300)
    reader = drt.ReaderConfig(seed=4, shard_window=2)
    remote = runtime.cached_dataset(url, reader_config=reader, storage_options=options(proxy),
                                    remote_config=remote_config(tmp_path))  # this process's client exists now
    kwargs = dict(sample_transform_fn=payload, batch_size=32, num_workers=2, multiprocessing_context="fork")
    got = [b.tolist() for b in remote.to_torch_dataloader(**kwargs)]  # every shard is fetched by the workers
    assert got == [b.tolist() for b in runtime.cached_dataset(local, reader_config=reader).to_torch_dataloader(
        **kwargs)]


def _sequential(runtime, tmp_path, endpoint, proxy) -> drt.CachedDataset:
    """800 rows in shards of ~50 rows, read in order; 4 shards of bytes ahead, 4 batches of lookahead."""
    local, url = publish_local(runtime, tmp_path, endpoint, n=800, max_shard_bytes=400)
    shard_bytes = max(s for _, s in open_cache(local).shards)
    config = remote_config(tmp_path, prefetch_bytes=4 * shard_bytes, lookahead_batches=4)
    return runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                  storage_options=options(proxy), remote_config=config)


def _present(ds) -> list[bool]:
    """Which shards the node cache holds once the prefetcher has followed its plan."""
    wait_idle(ds.layouts[0].backend.prefetcher)
    return [f.present() for f in ds.reader._caches[0].shards]


def _dataset_batches(ds):  # 40 rows of ~8 bytes per batch, one shard in about 1.3 batches
    return ds.iter_batches(40), 6


def _cache_loader(ds):  # the row fetcher plans its consumer's next batches before reading
    return iter(ds.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=40, num_workers=0)), 6


def _sampler_node(ds):  # blocks of AHEAD_ROWS=64 rows: 4 blocks ahead reach row 255, within 4 shards
    node = CacheReaderNode(CacheSampler(ds, shuffle=False), ds)
    node.reset()
    return node, 4 * CacheSampler.AHEAD_ROWS


@pytest.mark.parametrize("reading", [_dataset_batches, _cache_loader, _sampler_node],
                         ids=["iter_batches", "to_torch_dataloader", "CacheSampler"])
def test_iteration_prefetches_the_next_shards_in_order_within_the_bytes_ahead(runtime, tmp_path, moto_endpoint,
                                                                              proxy, reading):
    ds = _sequential(runtime, tmp_path, moto_endpoint, proxy)
    items, steps = reading(ds)
    next(items)
    present = _present(ds)
    assert present[:4] == [True] * 4  # what the next reads need, in order...
    assert not any(present[6:])  # ... and no further than the bytes ahead allow
    for _ in range(steps):
        next(items)
    present = _present(ds)
    assert all(present[:8]) and not any(present[12:])


def test_a_dataset_of_urls_loads_with_a_work_dir_but_has_no_dataset_json(runtime, tmp_path, moto_endpoint, proxy):
    runtime.dataset_class = compat.CachedDataset  # dataset-rt's export (dataset.json) is compat's
    ds = _sequential(runtime, tmp_path, moto_endpoint, proxy)
    with pytest.raises(ValueError, match="local caches only"):
        ds.dump_config(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    loader = ds.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=100, num_workers=0, work_dir=work,
                                    shuffle=False, verbose=False)
    assert torch.cat(list(loader)).tolist() == list(range(800))
    (sub,) = work.iterdir()
    assert sorted(p.name for p in sub.iterdir()) == ["meta.arrow"]


def test_a_checkpoint_resumes_on_a_fresh_node_cache_without_a_replay(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=1200, max_shard_bytes=600)
    reader = drt.ReaderConfig(seed=9, shard_window=2)
    kwargs = dict(sample_transform_fn=sample_id, batch_size=50, samples_per_epoch=1200)
    node_a = runtime.cached_dataset(url, reader_config=reader, storage_options=options(proxy),
                                    remote_config=remote_config(tmp_path / "a"))
    loader = node_a.to_torch_dataloader(**kwargs)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(13)]
    state = loader.state_dict()
    tail = [b.tolist() for b in it]
    proxy.reset()
    node_b = drt.DatasetRuntime(1).cached_dataset(url, reader_config=reader, storage_options=options(proxy),
                                                  remote_config=remote_config(tmp_path / "b", prefetch_shards=1))
    resumed = node_b.to_torch_dataloader(**kwargs)
    resumed.load_state_dict(state)
    it = iter(resumed)
    first = next(it).tolist()
    shard_gets = sum(n for path, n in proxy.gets.items() if "/shards/" in path)
    window_shards = 2 + 1  # a window, and the neighbour a cut at a random offset can add
    assert shard_gets <= 3 * window_shards  # the batch's records and its shards, not the 13 batches before it
    assert [first, *(b.tolist() for b in it)] == tail
    assert len(head) == 13


def test_with_half_the_dataset_in_the_node_cache_epoch_two_downloads_about_half(runtime, tmp_path, moto_endpoint,
                                                                              proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=4000, max_shard_bytes=16_000, payload_bytes=400)
    layout = open_cache(local)  # 100 shards of 40 rows
    data_bytes = sum(s for _, s in layout.shards)
    small = sum(p.stat().st_size for p in local.iterdir() if p.is_file())
    config = remote_config(tmp_path, cache_limit=data_bytes // 2 + small, prefetch_bytes=data_bytes // 8, open_shards=4)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=2, shard_window=2),
                                storage_options=options(proxy), remote_config=config)
    loader = ds.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=100)
    first = _ids(loader)
    wait_idle(ds.layouts[0].backend.prefetcher)
    proxy.reset()
    second = _ids(loader)
    wait_idle(ds.layouts[0].backend.prefetcher)
    assert sorted(first) == sorted(second) == list(range(4000)) and first != second
    assert proxy.bytes_out <= 0.55 * data_bytes, (proxy.bytes_out, data_bytes)


def _rank_job(rank: int, world: int, init: str, url: str, opts: dict, cache_dir: str, out) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        config = drt.RemoteConfig(cache_dir=cache_dir, cache_limit=1 << 30)
        ds = drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=5, shard_window=1),
                                                  storage_options=opts, remote_config=config)
        loader = ds.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=25)
        ids = _ids(loader)
        for shard in ds.reader._caches[0].shards:
            shard.fetch()  # every shard in the node cache, by whichever rank gets there first
        out.put((rank, ids))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_and_their_workers_share_one_node_cache(runtime, tmp_path, moto_endpoint, proxy):
    import multiprocessing

    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=600, max_shard_bytes=1000)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    from remote_servers import free_port

    init = f"tcp://127.0.0.1:{free_port()}"
    cache_dir = str(tmp_path / "node")
    procs = [ctx.Process(target=_rank_job, args=(r, 2, init, url, options(proxy), cache_dir, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=200) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(results[0] + results[1]) == list(range(600))  # the ranks share one exact order
    shards = [path for path in proxy.gets if "/shards/" in path]
    sizes = dict(open_cache(local).shards)
    for path in shards:
        whole = [r for r in proxy.ranges[path] if r == f"bytes=0-{sizes[path.rsplit('/', 1)[1]] - 1}"]
        assert len(whole) == 1, (path, proxy.ranges[path])  # each shard downloaded once for the node
    for name in ("manifest.json", "index.bin", "metadata.arrow"):
        assert proxy.gets[f"/{url[5:]}/{name}"] == 1


def test_closing_a_loader_stops_the_prefetch_it_started(runtime, tmp_path, moto_endpoint, proxy):
    """At 0 workers the prefetcher is the process's: a closed (abandoned) loader's plan must not keep downloading."""
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=2000, max_shard_bytes=400)
    config = remote_config(tmp_path, prefetch_shards=1)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                storage_options=options(proxy), remote_config=config)
    data = Path(config.cache_dir) / "data"
    proxy.latency = 0.2  # downloads take a while: most of the plan is still ahead at close
    loader = ds.to_torch_dataloader(sample_transform_fn=sample_id, batch_size=64, num_workers=0)
    next(iter(loader))  # the plan: the shards of the next 4 batches (~6 shards)
    loader.close()
    at_close = len(os.listdir(data)) + len(os.listdir(data.parent / "tmp"))  # (the first batch's may be in flight)
    wait_idle(ds.reader._caches[0].backend.prefetcher)
    time.sleep(0.5)
    assert len(os.listdir(data)) <= at_close + 1, at_close  # the one download in flight (prefetch_shards) at most
