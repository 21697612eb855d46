"""How the writer puts records on disk: chunked writes on a helper thread, and a disk that fills up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import run_isolated

import torch_drt as drt
from torch_drt.cache import writer
from torch_drt.cache._shard_files import ShardFiles
from torch_drt.cache._shard_hash import ShardHash
from torch_drt.cache.validate import open_cache


class Items:
    def __init__(self, name, items):
        self.name, self.items = name, items

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize(
    ("chunk_bytes", "batch_bytes", "shard_bytes"),
    [(1, 1, 300), (7, 100, 300), (64, 0, 300), (64, 250, 300), (64, 250, 100_000), (1 << 22, 60, 100_000),
     (1 << 22, 1 << 22, 300)],
)
def test_records_across_chunk_and_shard_boundaries_round_trip_with_valid_checksums(
    runtime, tmp_path, monkeypatch, chunk_bytes, batch_bytes, shard_bytes
):
    # records smaller, equal to and larger than a chunk, empty ones, several shards and one larger than a shard,
    # handed over one by one and in batches that fit a shard or cross into the next
    monkeypatch.setattr(ShardFiles, "_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(writer, "_BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(writer, "_RECORD_COST", 1)
    monkeypatch.setattr(ShardFiles, "_HASH_BYTES", 90)  # shards hashed (read back) in pieces as they grow,
    monkeypatch.setattr(ShardHash, "_READ_BYTES", 50)  # each read back in several reads
    monkeypatch.setattr(ShardFiles, "_WRITEBACK_BYTES", 100)  # the write-back head start, between the writes
    rng = np.random.default_rng(0)
    sizes = [0, 1, 7, 8, 63, 64, 65, 0, 200, 3, 1000, 5, 0, 64, 128] * 3
    payloads = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    items = [drt.CacheInput(p, {"i": i}) for i, p in enumerate(payloads)]
    cfg = drt.WriterConfig(show_progress=False, max_shard_bytes=shard_bytes)
    (res,) = runtime.write_cache([Items("chunks", items)], tmp_path, writer_config=cfg)
    layout = open_cache(res.path, verify=True)  # every shard's SHA-256 and every record's XXH3 checked
    assert (len(layout.shards) > 3) == (shard_bytes == 300)
    assert [size for _, size in layout.shards] == [(res.path / "shards" / name).stat().st_size
                                                   for name, _ in layout.shards]
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == payloads


_FULL_DISK = """
import os
import torch_drt as drt

class Source:
    name = "full"
    def __iter__(self):
        return (drt.CacheInput(os.urandom(100_000), {"i": i}) for i in range(40))

root = ROOT
with drt.DatasetRuntime(num_workers=1) as rt:
    try:
        rt.write_cache([Source()], root, writer_config=drt.WriterConfig(show_progress=False))
    except drt.CacheSourcesError as e:
        (result,) = e.results
        print("RESULT", type(result).__name__, result.message)
print("LEFT", sorted(os.listdir(root)))
"""


def test_a_full_disk_fails_the_source_with_a_typed_error_not_a_crash(tmp_path):
    # a 1 MiB file system filled by a 4 MB source: the old memory-mapped shards died of SIGBUS here
    if os.geteuid() != 0 or sys.platform != "linux":
        pytest.skip("mounting a small tmpfs needs root on Linux")
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        proc = run_isolated(_FULL_DISK.replace("ROOT", repr(str(mount))), timeout=120)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "RESULT CacheWriteError OSError: [Errno 28] No space left on device" in proc.stdout, proc.stdout
    # nothing published, the staging directory removed; the name's publish lock file (taken to make it) stays
    assert "LEFT ['.full.lock']" in proc.stdout, proc.stdout


def test_the_writer_helper_thread_ends_after_a_failed_source(runtime, tmp_path):
    class Failing:
        name = "failing"

        def __iter__(self):
            yield drt.CacheInput(b"x" * 100, {"i": 0})
            raise RuntimeError("source broke")

    import threading

    before = {t.name for t in threading.enumerate()}
    try:
        runtime.write_cache([Failing()], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    except drt.CacheSourcesError as e:
        (result,) = e.results
    assert isinstance(result, drt.CacheWriteError) and "source broke" in result.message
    assert not [t for t in threading.enumerate() if t.name.startswith("torch_drt-shard") and t.name not in before]
    assert [p.name for p in Path(tmp_path).iterdir()] == [".failing.lock"]  # the name's publish lock only


def test_a_slow_sources_records_are_written_while_it_runs_not_all_at_its_end(runtime, tmp_path, monkeypatch):
    # records that come slowly (a build converting images) are handed to the shard writer a few at a time, so their
    # writing overlaps the source instead of all of it waiting for the end (the batch would hold 4 MiB)
    monkeypatch.setattr(writer, "_BATCH_SECONDS", 0.0)
    seen: list[int] = []

    class Slow:
        name = "slow"

        def __iter__(self):
            for i in range(64):
                if i == 40:  # the first records are on disk before the source ends (bounded wait, not a timing)
                    (shard,) = tmp_path.glob(".staging-*-slow/shards/000000.bin")
                    deadline = time.monotonic() + 30
                    while shard.stat().st_size < 8 * 100 and time.monotonic() < deadline:
                        time.sleep(0.01)
                    seen.append(shard.stat().st_size)
                yield drt.CacheInput(bytes([i]) * 100, {"i": i})

    (res,) = runtime.write_cache([Slow()], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    assert seen and seen[0] >= 8 * 100
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == [bytes([i]) * 100 for i in range(64)]


def test_a_short_writev_is_continued_where_it_stopped(runtime, tmp_path, monkeypatch):
    # writev may write less than it was given (a signal, a disk filling up): the rest is written after it, in order
    real_write = os.write

    def short_writev(fd: int, buffers) -> int:  # writes at most 3,000 bytes, ending mid-record
        return real_write(fd, b"".join(bytes(b) for b in buffers)[:3000])

    monkeypatch.setattr(os, "writev", short_writev)
    payloads = [bytes([i]) * (700 + i) for i in range(40)]
    items = Items("short", [drt.CacheInput(p, {"i": i}) for i, p in enumerate(payloads)])
    (res,) = runtime.write_cache([items], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    open_cache(res.path, verify=True)
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == payloads


def test_the_last_shard_is_synced_with_the_small_files_and_a_small_cache_starts_no_shard_thread(
    runtime, tmp_path, monkeypatch
):
    # the last shard's sync runs in the one batch of the index, metadata, manifest and directories (one journal
    # commit, not two after each other), and a cache too small for a write-back or a read-back job starts no helper
    import threading

    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append((os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1], threading.current_thread().name))

    monkeypatch.setattr(os, "fsync", fsync)
    started: list[str] = []
    real_start = threading.Thread.start

    def start(self) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    items = Items("small", [drt.CacheInput(bytes([i]) * 100, {"i": i}) for i in range(30)])
    (res,) = runtime.write_cache([items], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    assert [name for name in started if name.startswith("torch_drt-shard")] == []
    batch = {name: thread for name, thread in synced if thread.startswith("torch_drt-fsync")}
    assert {"000000.bin", "index.bin", "metadata.arrow", "manifest.json", "shards"} <= set(batch), synced
    open_cache(res.path, verify=True)


def test_a_shard_shortened_under_the_hasher_is_an_os_error_not_a_sigbus(tmp_path):
    # the hasher maps the shard's written bytes: a file cut short meanwhile (another process) must be a typed error
    # raised by the write, never a SIGBUS killing the process on a mapped page past the end of the file
    import hashlib

    path = tmp_path / "000000.bin"
    data = bytes(range(256)) * 64  # 16 KiB: several pages, so the second map starts past the first
    path.write_bytes(data)
    shard = ShardHash(path)
    try:
        shard.upto(5000)
        os.truncate(path, 4096)
        with pytest.raises(OSError, match="ends at 4096 bytes"):
            shard.upto(len(data))
    finally:
        shard.close()
    path.write_bytes(data)
    assert ShardHash(path).finish(len(data)) == hashlib.sha256(data).hexdigest()
