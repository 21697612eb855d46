"""The node-local shard cache: one download per node however many processes want a shard, nothing half-written
ever read, least-recently-used eviction that never pulls a shard from under its reader, a clear full-disk error."""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.cache import CacheCorruptError, CacheReader
from torch_drt.locations import backend_for
from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]


def _writer(data: bytes):
    def download(fd: int) -> None:
        os.pwrite(fd, data, 0)

    return download


def _no_check(path: Path) -> None:
    return None


def _fill(cache: NodeCache, key: str, size: int) -> None:
    cache.fetch(key, size, _writer(bytes([len(key) % 251]) * size), _no_check, key)


def test_least_recently_used_files_go_first_and_pinned_ones_stay(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=3000)
    for i, key in enumerate(["sha256-a", "sha256-b", "sha256-c"]):
        _fill(cache, key, 1000)
        os.utime(cache.path(key), (100 + i, 100 + i))  # a, b, c from oldest to newest use
    pinned = cache.pin("sha256-a", 1000)  # a reader maps the oldest one (its use refreshes it)
    os.utime(cache.path("sha256-a"), (1, 1))  # ... yet it is still the least recently used
    _fill(cache, "sha256-d", 1000)  # over the limit: the oldest file nobody holds goes (b)
    assert sorted(p.name for p in (tmp_path / "n" / "data").iterdir()) == ["sha256-a", "sha256-c", "sha256-d"]
    assert bytes(pinned.map[:3]) == bytes([len("sha256-a") % 251]) * 3
    pinned.close()
    _fill(cache, "sha256-e", 1000)  # now a is free to go
    assert sorted(p.name for p in (tmp_path / "n" / "data").iterdir()) == ["sha256-c", "sha256-d", "sha256-e"]
    assert cache.usage() <= cache.limit


def test_demoted_files_go_before_every_file_still_wanted(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=3000)
    for key in ["sha256-a", "sha256-b", "sha256-c"]:
        _fill(cache, key, 1000)
    cache.demote("sha256-c")  # the newest, but no planned read wants it any more
    cache.demote("sha256-b")
    _fill(cache, "sha256-d", 1000)  # over the limit: the first file demoted goes (c), not the oldest (a)
    assert sorted(p.name for p in (tmp_path / "n" / "data").iterdir()) == ["sha256-a", "sha256-b", "sha256-d"]
    cache.demote("sha256-missing")  # a file not (or no longer) here: nothing to do


def test_a_file_another_reader_holds_is_not_demoted(tmp_path):
    """A process done with a shard demotes it, but a neighbour that holds it for its next reads (a loading process
    whose block starts where this one's ends) still wants it: the eviction takes the others first."""
    cache = NodeCache(tmp_path / "n", limit=3000)
    for key in ["sha256-a", "sha256-b", "sha256-c"]:
        _fill(cache, key, 1000)
    neighbour = cache.pin("sha256-c", 1000, mapped=False)  # a descriptor of its own: another reader's shared lock
    cache.demote("sha256-c")
    cache.demote("sha256-b")
    neighbour.close()
    _fill(cache, "sha256-d", 1000)  # over the limit: b goes, not the newest, held-when-demoted c
    assert sorted(p.name for p in (tmp_path / "n" / "data").iterdir()) == ["sha256-a", "sha256-c", "sha256-d"]


def test_a_file_evicted_between_open_and_lock_is_fetched_again(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=10_000)
    _fill(cache, "sha256-x", 100)
    fd = os.open(cache.path("sha256-x"), os.O_RDONLY)  # a reader got as far as opening it...
    cache.path("sha256-x").unlink()  # ... when an eviction removed it
    assert cache.pin("sha256-x", 100) is None  # the reader is told to fetch it again
    os.close(fd)


def test_a_rejected_download_leaves_nothing(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=10_000)

    def reject(path: Path) -> None:
        raise CacheCorruptError("s3://b/c/shards/0.bin", "sha256 of the downloaded file is wrong")

    with pytest.raises(CacheCorruptError):
        cache.fetch("sha256-y", 10, _writer(b"x" * 10), reject, "s3://b/c/shards/0.bin")
    assert not list((tmp_path / "n" / "data").iterdir()) and not list((tmp_path / "n" / "tmp").iterdir())


def _fetch_after_barrier(url: str, opts: dict, cache_dir: str, barrier) -> None:
    reader = CacheReader.open([backend_for(url, opts, drt.RemoteConfig(cache_dir=cache_dir, cache_limit=1 << 30))])
    barrier.wait()
    for shard in reader._caches[0].shards:
        shard.fetch()  # what a read that needs the shard, or the prefetcher, runs


def test_eight_processes_wanting_one_shard_download_it_once(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1 << 20)
    proxy.latency = 0.3  # every request is slow: the eight overlap
    ctx = multiprocessing.get_context("fork")  # forked, not spawned: eight interpreters would cost seconds each
    barrier = ctx.Barrier(8)
    cache_dir = str(tmp_path / "node")
    procs = [ctx.Process(target=_fetch_after_barrier, args=(url, options(proxy), cache_dir, barrier))
             for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    shard = f"/{url[5:]}/shards/000000.bin"
    assert proxy.gets[shard] == 1, proxy.ranges[shard]
    assert proxy.gets[f"/{url[5:]}/manifest.json"] == 1  # small files too: once per node
    assert proxy.gets[f"/{url[5:]}/index.bin"] == 1


def test_a_downloader_killed_mid_shard_leaves_nothing_that_is_read(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=2000, max_shard_bytes=1 << 20)
    proxy.latency = 0.2
    node = tmp_path / "node"
    code = textwrap.dedent(f"""
        import torch_drt as drt
        from torch_drt.cache import CacheReader
        from torch_drt.locations import backend_for
        config = drt.RemoteConfig(cache_dir={str(node)!r}, cache_limit=1 << 30, chunk_bytes=1024)
        reader = CacheReader.open([backend_for({url!r}, {options(proxy)!r}, config)])
        print("opened", flush=True)
        reader._caches[0].shards[0].fetch()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "opened"
    deadline = time.time() + 60
    while not list((node / "tmp").iterdir()) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # a chunk or two written
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    leftovers = list((node / "tmp").iterdir())
    assert leftovers and not any(p.name.startswith("sha256-") for p in (node / "data").iterdir())
    proxy.latency = 0
    config = remote_config(tmp_path, cache_dir=str(node), chunk_bytes=1 << 20)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                storage_options=options(proxy), remote_config=config)
    ds.reader._caches[0].shards[0].fetch()
    local_ds = runtime.cached_dataset(local, reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == [s.data for s in local_ds]
    assert not any(p.exists() for p in leftovers)  # the next downloader removed the dead one's part file


def _read_all(url: str, opts: dict, cache_dir: str, limit: int, seed: int, out) -> None:
    config = drt.RemoteConfig(cache_dir=cache_dir, cache_limit=limit, open_shards=2, prefetch_shards=2)
    ds = drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=seed),
                                              storage_options=opts, remote_config=config)
    ds.set_epoch_len(3 * len(ds))
    out.put([b.data for b in ds.iter_batches(32)])


def test_eviction_under_a_small_limit_while_readers_run(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=600, max_shard_bytes=400)
    shard_bytes = max(s for _, s in drt.cache.open_cache(local).shards)
    small = sum(p.stat().st_size for p in local.iterdir() if p.is_file())  # index and metadata stay too
    limit = small + 3 * shard_bytes  # the dataset is ~15 shards: constant eviction
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    cache_dir = str(tmp_path / "node")
    procs = [ctx.Process(target=_read_all, args=(url, options(proxy), cache_dir, limit, seed, out))
             for seed in (1, 2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=150) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for seed in (1, 2):
        expected = runtime.cached_dataset(local, reader_config=drt.ReaderConfig(seed=seed))
        expected.set_epoch_len(3 * len(expected))
        assert [b.data for b in expected.iter_batches(32)] in results
    cache = NodeCache(cache_dir, limit)
    assert cache.usage() <= limit + 8 * shard_bytes  # over by at most what the readers held at the last download
    shards = [p for p in (Path(cache_dir) / "data").iterdir() if p.name.startswith("sha256-")]
    assert len(shards) < 15  # evicted


def _tmpfs_runner() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return ["unshare", "-rm"] if probe.returncode == 0 else None


def test_a_full_disk_is_a_clear_error_and_leaves_no_half_written_shard(runtime, tmp_path, moto_endpoint, proxy):
    runner = _tmpfs_runner()
    if runner is None:
        pytest.skip("no user namespaces here to mount a small tmpfs")
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20000, max_shard_bytes=1 << 20)
    small = tmp_path / "small"
    small.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(f"""
        import errno, os, sys
        import torch_drt as drt
        from torch_drt.cache import CacheReader
        from torch_drt.locations import backend_for
        config = drt.RemoteConfig(cache_dir={str(small / "node")!r}, cache_limit=1 << 30)
        reader = CacheReader.open([backend_for({url!r}, {options(proxy)!r}, config)])  # the index fits
        try:
            reader._caches[0].shards[0].fetch()  # ~160 KiB of payloads do not fit in what is left
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            print("ERROR", e)
        data = os.listdir({str(small / "node" / "data")!r})
        print("DATA", sorted(data))
        print("TMP", os.listdir({str(small / "node" / "tmp")!r}))
    """))
    size = 32 * 1024 + (local / "index.bin").stat().st_size  # the reader keeps only the index (and the manifest)
    command = f"mount -t tmpfs -o size={size} none {small} && {sys.executable} {script}"
    proc = subprocess.run([*runner, "sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR" in proc.stdout, proc.stdout
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "no space left on the device" in lines["ERROR"] and f"{url}/shards/000000.bin" in lines["ERROR"]
    assert "sha256-" not in lines["DATA"] and lines["TMP"] == "[]"
    assert errno.ENOSPC


def test_a_download_under_a_lock_file_made_again_is_not_taken_for_a_leftover(tmp_path):
    """The cache's lock files were removed while a download ran: a second downloader of the same file (another
    process: this one's threads queue on an in-process lock first) holds the new lock file, yet must not delete the
    first one's download as a killed process's leftover."""
    cache = NodeCache(tmp_path / "n", limit=1 << 20)
    started, release, errors = threading.Event(), threading.Event(), []

    def slow(fd: int) -> None:
        os.write(fd, b"x" * 100)
        started.set()
        release.wait(60)

    def first() -> None:
        try:
            cache.fetch("sha256-k", 100, slow, _no_check, "k")
        except Exception as e:  # the old code: FileNotFoundError for its own temporary file
            errors.append(e)

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(60)
    shutil.rmtree(tmp_path / "n" / "locks")  # emptied by someone while the download runs
    second = multiprocessing.get_context("fork").Process(target=_fill, args=(cache, "sha256-k", 100))
    second.start()  # a second downloader: its lock file is new, so it holds it
    second.join(60)
    release.set()
    thread.join(60)
    assert second.exitcode == 0 and errors == []  # both downloads completed; the file is one of them
    assert cache.path("sha256-k").read_bytes() in (b"x" * 100, bytes([len("sha256-k") % 251]) * 100)
