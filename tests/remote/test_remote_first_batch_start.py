"""A loader with loading processes over a cache at a URL: before it forks them, its own process plans their first
batches and requests their shards (their fork and start-up are no longer ahead of the first request), and the
forked processes read with the reader and the streams it opened for that (no index opened again). A fork waits
for those requests to go out (at most ``_warm_start.FORK_WAIT_S``), not for the downloads: they go on in the
loader's process, and a child waits for them as for any other process's. The batches are the ones the loader gives
at 0 workers, from the start and from a resume."""

from __future__ import annotations

import functools
import gc
import json
import os
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.cache.reader import CacheReader
from torch_drt.locations.remote import RemoteBackend
from torch_drt.nodecache import _warm_start, prefetch

pytestmark = pytest.mark.timeout(120)
_ENTERED: list[str] = []  # the downloads this process entered (a forked child sees its parent's, as at the fork)


def _items(sample):
    return bytes(sample.data), sample.sample_id


def _report(out: str, worker_id: int) -> None:
    """worker_init_fn: write what the loading process inherited at its fork."""
    Path(out, f"entered-{worker_id}.json").write_text(json.dumps(_ENTERED))


def _loader(ds, workers: int, init=None, timeout: float = 0):
    return ds.to_torch_dataloader(batch_size=16, num_workers=workers, sample_transform_fn=_items, collate_fn=list,
                                  multiprocessing_context="fork", native_num_workers=1, worker_init_fn=init,
                                  timeout=timeout)


def _open(runtime, url, proxy, tmp_path, name):
    return runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=5, shard_window=2),
                                  storage_options=options(proxy),
                                  remote_config=remote_config(tmp_path / name, prefetch_shards=16))


def _shards_of(ds, batches) -> set[str]:
    """The shard files (relative paths) the ``batches`` of ``_loader`` read."""
    ids = np.array([sample_id for batch in batches for _, sample_id in batch], dtype=np.int64)
    groups = ds.reader.shard_groups(np.zeros(len(ids), dtype=np.int64), ids)
    return {ds.reader._caches[0].shards[g].rel for g in np.unique(groups).tolist()}


def test_the_first_batches_shards_are_requested_before_the_loading_processes_are_forked(
        runtime, tmp_path, moto_endpoint, proxy, monkeypatch):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    expected = list(_loader(_open(runtime, url, proxy, tmp_path, "inline"), 0))
    monkeypatch.setattr(_warm_start, "FORK_WAIT_S", 60.0)  # "before the fork" whatever the machine's load
    download, opened = RemoteBackend.download, tmp_path / "opened"

    def entered(self, rel, *args, **kwargs):
        _ENTERED.append(rel)
        return download(self, rel, *args, **kwargs)

    def reader_open(*args, **kwargs):
        with opened.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return open_reader(*args, **kwargs)

    open_reader = CacheReader.open
    monkeypatch.setattr(RemoteBackend, "download", entered)
    monkeypatch.setattr(CacheReader, "open", staticmethod(reader_open))
    ds = _open(runtime, url, proxy, tmp_path, "processes")
    _ENTERED.clear()
    proxy.reset()
    out = tmp_path / "reports"
    out.mkdir()
    got = list(_loader(ds, 2, functools.partial(_report, str(out))))
    assert got == expected
    first = _shards_of(ds, expected[:2])  # the first batch of each loading process
    for worker in (0, 1):
        at_fork = set(json.loads((out / f"entered-{worker}.json").read_text()))
        assert first <= at_fork, "a first batch's shard was not requested before the loading processes' fork"
    for rel in first:  # downloaded once, by the loader's process
        assert sum(n for path, n in proxy.gets.items() if path.endswith(f"/{rel}")) == 1, (rel, dict(proxy.gets))
    pids = set(opened.read_text().split()) if opened.exists() else set()
    assert pids <= {str(os.getpid())}, "a loading process opened the caches again"


def test_a_fork_waits_for_the_requests_not_the_downloads_and_the_child_waits_for_them(
        runtime, tmp_path, moto_endpoint, proxy, monkeypatch):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    ds = _open(runtime, url, proxy, tmp_path, "fork")
    files = list(ds.reader._caches[0].shards[:3])
    monkeypatch.setattr(_warm_start, "FORK_WAIT_S", 60.0)  # requested before the fork whatever the machine's load
    proxy.latency = 1.0  # each download is in flight for a while
    downloads = tmp_path / "fork" / "node-cache" / "tmp"
    _warm_start.fetch_now(files, threads=3)
    pid = os.fork()
    if pid == 0:  # the child: the downloads were in flight at its fork; it waits for the parent's, then reads
        code = 10 + min(len(list(downloads.iterdir())) if downloads.exists() else 0, 9)
        try:
            if not files[0].fetch() or not files[0].present():
                code = 1
        except BaseException:
            code = 2
        os._exit(code)
    t0 = time.monotonic()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 13  # three downloads in flight at the fork; the child then read
    assert time.monotonic() - t0 < 30
    deadline = time.monotonic() + 30
    while _warm_start.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(f.present() for f in files)
    assert all(n == 1 for n in proxy.gets.values()), dict(proxy.gets)  # each downloaded once, by the parent


def test_a_fork_does_not_wait_for_files_queued_behind_busy_threads(runtime, tmp_path, moto_endpoint, proxy,
                                                                   monkeypatch):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    ds = _open(runtime, url, proxy, tmp_path, "queued")
    files = list(ds.reader._caches[0].shards[:3])
    monkeypatch.setattr(_warm_start, "FORK_WAIT_S", 60.0)
    proxy.latency = 2.0
    _warm_start.fetch_now(files, threads=1)  # one in flight, two queued behind it
    pid = os.fork()
    if pid == 0:  # the child reports the files downloaded at its fork
        os._exit(sum(f.present() for f in files))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # the fork came while the first download was in flight
    deadline = time.monotonic() + 30
    while _warm_start.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(f.present() for f in files)  # the queued ones downloaded after the fork, in this process


def test_a_resume_with_loading_processes_gives_the_inline_loaders_batches(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    expected = list(_loader(_open(runtime, url, proxy, tmp_path, "inline"), 0))
    first = _loader(_open(runtime, url, proxy, tmp_path, "first"), 2)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it
    resumed = _loader(_open(runtime, url, proxy, tmp_path, "resumed"), 2)
    resumed.load_state_dict(state)
    assert head + list(resumed) == expected


class _Collecting(threading.Thread):
    """A thread on which a garbage collection runs first, before it reports started (as one may, any time): the
    first one a process starts."""

    collected_in: set[int] = set()

    def _bootstrap_inner(self) -> None:
        if os.getpid() not in self.collected_in:
            self.collected_in.add(os.getpid())
            gc.collect()
        super()._bootstrap_inner()


def test_a_loading_process_collecting_its_parents_loader_as_a_download_thread_starts_reads_on(
        runtime, tmp_path, moto_endpoint, proxy, monkeypatch):
    """A forked loading process inherits its parent's garbage: a loader no longer referenced, waiting for the
    collector. Collected there on a prefetch download thread as it starts, its ``__del__`` closes it; that close
    waited for the prefetcher's lock, held by the process's first plan while it started that thread: the process
    hung in its first batch (under load, once in a while; here the first download thread starts with a collection)."""
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    old = _loader(_open(runtime, url, proxy, tmp_path, "old"), 0)
    expected = list(old)
    monkeypatch.setattr(prefetch, "threading", types.SimpleNamespace(**{**vars(threading), "Thread": _Collecting}))
    gc.collect()  # (the garbage of the tests before: the loading processes collect only the old loader)
    gc.disable()  # (which is collected in the loading processes, not before)
    try:
        cycle: list = [old]
        cycle.append(cycle)
        del old, cycle
        got = list(_loader(_open(runtime, url, proxy, tmp_path, "new"), 2, timeout=30))
    finally:
        gc.enable()
    assert got == expected  # (before: a TimeoutError, the loading processes stuck in their first batch)
