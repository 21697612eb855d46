"""The durable writer's syncs behind the writes: each shard's write-back head start and its sync on helper threads."""

from __future__ import annotations

import errno
import os
import threading

import pytest
from conftest import ListSource

import torch_drt as drt
from torch_drt.cache import _shard_files
from torch_drt.cache._shard_files import ShardFiles
from torch_drt.cache.validate import open_cache

# records of 5 to 11 bytes, shards of at most 64: a write-back start after every write, several shards
_CONFIG = drt.WriterConfig(show_progress=False, max_shard_bytes=64)


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "<closed>"


@pytest.mark.skipif(_shard_files._sync_file_range is None, reason="no sync_file_range here (Linux only)")
def test_each_write_back_start_targets_its_own_shard_while_a_full_shards_sync_is_slow(runtime, tmp_path, monkeypatch):
    # a disk slow to sync: every full shard's sync waits until the last shard is sealed (closed by the writer). The
    # write-back starts of the shards written meanwhile must still reach their own files, at once: none may run on
    # a descriptor closed (or reused for another file) in between
    monkeypatch.setattr(ShardFiles, "_WRITEBACK_BYTES", 1)
    sealed = threading.Event()
    real_seal, real_sync_and_close = ShardFiles.seal, _shard_files.sync_and_close

    def seal(self) -> None:
        real_seal(self)
        sealed.set()

    def slow_sync_and_close(fd: int) -> None:
        assert sealed.wait(20), "the last shard was never sealed"
        real_sync_and_close(fd)

    targets: list[str] = []
    real_range = _shard_files._sync_file_range

    def sync_file_range(fd, offset, nbytes, flags):
        targets.append(_path_of(fd))
        return real_range(fd, offset, nbytes, flags)

    monkeypatch.setattr(ShardFiles, "seal", seal)
    monkeypatch.setattr(_shard_files, "sync_and_close", slow_sync_and_close)
    monkeypatch.setattr(_shard_files, "_sync_file_range", sync_file_range)
    (res,) = runtime.write_cache([ListSource("slow", 40)], tmp_path, writer_config=_CONFIG)
    assert isinstance(res, drt.CacheWriteSuccess), res
    shards = sorted(p.name for p in (res.path / "shards").iterdir())
    assert len(shards) > 3, shards
    staged = [t.rsplit("/", 2) for t in targets]
    assert all(len(s) == 3 and s[1] == "shards" and s[2] in shards for s in staged), targets
    assert sorted({s[2] for s in staged}) == shards  # every shard got its head start
    open_cache(res.path, verify=True)


@pytest.mark.parametrize("failing", ["fsync", "fdatasync"])
def test_a_shards_failed_sync_on_a_helper_fails_the_source_and_publishes_nothing(
    runtime, tmp_path, monkeypatch, failing
):
    # a full shard's sync (fsync) and a growing one's data syncs (fdatasync) run on helper threads while the next
    # records are written: an error of either is the source's error (never lost), and nothing is published
    monkeypatch.setattr(ShardFiles, "_DATASYNC_BYTES", 1 if failing == "fdatasync" else 1 << 30)
    real_sync = getattr(os, failing)

    def sync(fd: int) -> None:
        if _path_of(fd).endswith("/shards/000001.bin"):
            raise OSError(errno.EIO, "disk gone")
        real_sync(fd)

    monkeypatch.setattr(os, failing, sync)
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([ListSource("lost", 40)], tmp_path, writer_config=_CONFIG)
    (result,) = info.value.results
    assert isinstance(result, drt.CacheWriteError) and "disk gone" in result.message, result
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == []


@pytest.mark.parametrize("durable", [True, False])
def test_a_growing_shard_s_data_is_synced_as_it_is_written_not_all_at_the_end(runtime, tmp_path, monkeypatch, durable):
    # a device's write cache is flushed only by a sync, and the flush of a whole cache at its end is what a durable
    # create waits for: every ``_DATASYNC_BYTES`` the shard being written has its data synced on a helper thread,
    # every shard here; a scratch cache (durable=False) syncs nothing
    monkeypatch.setattr(ShardFiles, "_DATASYNC_BYTES", 1)  # after every write
    real = os.fdatasync
    synced: list[tuple[str, str]] = []

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append((os.path.basename(_path_of(fd)), threading.current_thread().name))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    config = _CONFIG.model_copy(update={"durable": durable})
    (res,) = runtime.write_cache([ListSource("grow", 40)], tmp_path, writer_config=config)
    assert isinstance(res, drt.CacheWriteSuccess), res
    shards = sorted(p.name for p in (res.path / "shards").iterdir())
    if not durable:
        assert synced == []
    else:
        assert all(thread.startswith("torch_drt-shard") for _, thread in synced), synced
        counts = {name: sum(1 for s, _ in synced if s == name) for name in shards}
        assert all(n >= 1 for n in counts.values()), (counts, synced)
    open_cache(res.path, verify=True)
