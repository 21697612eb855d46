"""A loader with loading processes over a cache at a URL: once it has started them, its own process downloads the
shards of their first batches while they start (their start-up, imports and store clients, is no longer ahead of
the first request). A fork of the process waits for those downloads first (no fork with a download in flight).
The batches are the ones the loader gives at 0 workers."""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path

import pytest
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.nodecache import _warm_start

pytestmark = pytest.mark.timeout(120)
HELD_S = 20.0  # the longest the loading processes are held at their start


def _items(sample):
    return bytes(sample.data), sample.sample_id


def _held_until(marker: str, worker_id: int) -> None:
    """worker_init_fn: the loading process waits (at most HELD_S) for ``marker`` to exist."""
    deadline = time.monotonic() + HELD_S
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)


def _loader(ds, workers: int, marker: Path | None = None):
    init = None if marker is None else functools.partial(_held_until, str(marker))
    return ds.to_torch_dataloader(batch_size=16, num_workers=workers, sample_transform_fn=_items, collate_fn=list,
                                  multiprocessing_context="fork", native_num_workers=1, worker_init_fn=init)


def _open(runtime, url, proxy, tmp_path, name):
    return runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=5, shard_window=2),
                                  storage_options=options(proxy), remote_config=remote_config(tmp_path / name))


def _shard_gets(proxy) -> int:
    return sum(n for path, n in list(proxy.gets.items()) if "/shards/" in path)


def test_the_first_batches_shards_download_while_the_loading_processes_start(runtime, tmp_path, moto_endpoint,
                                                                                proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    expected = list(_loader(_open(runtime, url, proxy, tmp_path, "inline"), 0))
    marker = tmp_path / "started"
    loader = _loader(_open(runtime, url, proxy, tmp_path, "processes"), 2, marker)
    proxy.reset()
    seen: list[int] = []

    def release() -> None:  # lets the held processes go once shard requests came (or after HELD_S)
        deadline = time.monotonic() + HELD_S
        while not _shard_gets(proxy) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(_shard_gets(proxy))
        marker.touch()

    watcher = threading.Thread(target=release, daemon=True)
    watcher.start()
    got = list(loader)
    watcher.join()
    assert seen[0] > 0, "no shard was requested while the loading processes were starting"
    assert got == expected


def test_a_fork_waits_for_the_downloads_started_for_the_first_batches(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    ds = _open(runtime, url, proxy, tmp_path, "fork")
    files = list(ds.reader._caches[0].shards[:3])
    proxy.latency = 0.5  # each download is in flight for a while
    _warm_start.fetch_now(files, threads=3)
    deadline = time.monotonic() + 20
    while not proxy.gets_now and time.monotonic() < deadline:  # a download is in flight
        time.sleep(0.005)
    assert proxy.gets_now
    downloads = tmp_path / "fork" / "node-cache" / "tmp"
    pid = os.fork()
    if pid == 0:  # the child reports the downloads in flight at its fork (their partial files)
        os._exit(min(100, len(list(downloads.iterdir())) if downloads.exists() else 0))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # the fork came after the downloads in flight ended
    assert not _warm_start.running()
    assert any(f.present() for f in files)
