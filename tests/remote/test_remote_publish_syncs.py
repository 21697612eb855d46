"""A cache written to a URL root syncs nothing locally: its staging directory is a private temporary copy and the
upload is what publishes it, durable in the object store; a cache written to a local root still syncs every file
and directory before its publishing rename."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from conftest import ListSource
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401

import torch_drt as drt
from torch_drt.cache.writer import write_source

pytestmark = pytest.mark.timeout(180)
CONFIG = drt.WriterConfig(show_progress=False, max_shard_bytes=300)  # several shards: full ones synced on helpers


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the sync calls (``fsync``, ``fdatasync``) made from any thread of this process while the test
    runs; each call is still made (counted, then passed on to the real one)."""
    calls: list[str] = []
    lock = threading.Lock()
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name, None)
        if real is None:
            continue

        def counted(fd: int, _real=real, _name=name) -> None:
            with lock:
                calls.append(_name)
            _real(fd)

        monkeypatch.setattr(os, name, counted)
    yield calls


def test_a_cache_written_to_s3_syncs_nothing_locally_and_a_local_one_still_syncs(tmp_path, proxy, syncs):
    name = unique("unsynced")
    result = write_source(ListSource(name, 200), f"s3://{BUCKET}", CONFIG, storage_options=options(proxy),
                          remote_config=remote_config(tmp_path))
    assert result == drt.CacheWriteSuccess(name, f"s3://{BUCKET}/{name}")
    assert syncs == []  # the staging copy is only uploaded: not one sync of it (11 before)
    remote = drt.DatasetRuntime(num_workers=1)
    try:
        ds = remote.cached_dataset(result.path, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                   storage_options=options(proxy), remote_config=remote_config(tmp_path))
        assert len(ds) == 200
    finally:
        remote.close()

    syncs.clear()
    local = write_source(ListSource(name, 200), tmp_path / "local", CONFIG)
    assert local == drt.CacheWriteSuccess(name, tmp_path / "local" / name)
    assert len(syncs) >= 5  # every shard, the index, metadata and manifest, the directories and the root
