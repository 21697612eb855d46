"""Epoch-two reuse of a node cache holding half the dataset with two loading processes (real processes, moto through
s3fs). Each reads every other batch of one stream, so its plan (64 of its batches: several epochs) drops and takes
back shards; marking a shard taken back (needed epochs later) as just used kept it over the shards read last, which
the next epoch reads first; and with 4 workers, four prefetch windows of a quarter of the node cache each filled it,
their downloads evicting the shards the next reads were to find. The second epoch downloads about half of the
dataset, as with 0 workers, not most of it, and the node cache stays within its bound meanwhile. (Fast siblings in
``test_shard_prefetcher.py``: the files marked recently used, a plan's own bytes ahead.)"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest
import torch
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.cache import open_cache

pytestmark = pytest.mark.timeout(300)


def _sample_id(sample) -> torch.Tensor:
    return torch.tensor(sample.sample_id)


def _usage(directory: Path) -> int:
    total = 0
    for sub in ("data", "tmp"):
        with contextlib.suppress(FileNotFoundError), os.scandir(directory / sub) as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


@pytest.mark.parametrize("workers", [2, 4])
def test_loading_processes_download_about_half_in_epoch_two(runtime, tmp_path, moto_endpoint, proxy, workers):
    n = 4000
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=n, max_shard_bytes=32 * 1054, payload_bytes=1024)
    layout = open_cache(local)  # 125 shards of 32 rows; a batch reads a window of four
    assert len(layout.shards) >= 120
    data_bytes = sum(s for _, s in layout.shards)
    small = sum(p.stat().st_size for p in local.iterdir() if p.is_file())
    limit = data_bytes // 2 + small
    config = remote_config(tmp_path, cache_limit=limit, prefetch_shards=8)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=1, shard_window=4),
                                storage_options=options(proxy), remote_config=config)
    loader = ds.to_torch_dataloader(sample_transform_fn=_sample_id, batch_size=128, num_workers=workers, shard_window=4,
                                    multiprocessing_context="fork")
    node_dir, peak, stop = Path(config.cache_dir), [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _usage(node_dir))
            stop.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        first = torch.cat(list(loader)).tolist()
        proxy.reset()
        second = torch.cat(list(loader)).tolist()
    finally:
        stop.set()
        watcher.join(10)
    assert sorted(first) == sorted(second) == list(range(n)) and first != second
    shard = max(s for _, s in layout.shards)
    assert peak[0] <= limit + workers * 3 * shard  # each reading process holds a shard, waits for two at most
    assert proxy.bytes_out <= 0.6 * data_bytes, (proxy.bytes_out / data_bytes)  # before: 83-88%; now 49-55%
