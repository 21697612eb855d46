"""``WriterConfig(durable=False)``: a scratch cache that syncs nothing, published by the same rename."""

from __future__ import annotations

import pytest
from conftest import ListSource, payload
from sync_events import record_sync_events

import torch_drt as drt
from torch_drt.cache import _shard_files
from torch_drt.cache._shard_files import ShardFiles
from torch_drt.cache.validate import open_cache

SEQ = drt.ReaderConfig(seed=0, shuffle=False)


@pytest.mark.parametrize("durable", [True, False])
def test_a_scratch_cache_syncs_nothing_and_reads_back_whole(runtime, tmp_path, monkeypatch, durable):
    # several shards, each past the write-back step: the durable default syncs every file and directory and starts
    # the write-back early; durable=False makes no fsync and no sync_file_range at all, and the cache it publishes
    # is the same (every checksum verified)
    events = record_sync_events(monkeypatch)
    writebacks = []
    if _shard_files._sync_file_range is not None:
        real = _shard_files._sync_file_range
        monkeypatch.setattr(_shard_files, "_sync_file_range", lambda *a: writebacks.append(a) or real(*a))
    monkeypatch.setattr(ShardFiles, "_WRITEBACK_BYTES", 16)
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=64, durable=durable)
    (res,) = runtime.write_cache([ListSource("scratch", 40)], tmp_path, writer_config=config)
    assert isinstance(res, drt.CacheWriteSuccess), res
    assert len(list((res.path / "shards").iterdir())) > 2
    synced = [key for kind, key in events if kind == "synced"]
    assert ("renamed", "scratch") in events
    if durable:
        assert len(synced) >= len([res.path, *res.path.rglob("*")]) + 1  # every entry, and the root
        assert writebacks or _shard_files._sync_file_range is None
    else:
        assert synced == [] and writebacks == []
    open_cache(res.path, verify=True)
    ds = runtime.cached_dataset([res.path], reader_config=SEQ)
    assert [s.data for s in ds] == [payload(i) for i in range(40)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]


def test_durable_is_the_default():
    assert drt.WriterConfig().durable is True
    assert drt.WriterConfig.model_validate({"durable": False}).durable is False
