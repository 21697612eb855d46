"""A node-cache copy damaged after it was verified is fetched anew once, then named in a typed error; a manifest
copy dated in the future expires like any other."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import ListSource
from remote_fixtures import downloaded, moto_fixture, options, proxy_fixture, publish_local, remote_config, unique  # noqa: F401
from remote_servers import upload_tree

import torch_drt as drt
from torch_drt.cache import CacheCorruptError
from torch_drt.checksums import xxh3_128_hex

pytestmark = pytest.mark.timeout(180)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _payloads(ds) -> list[tuple[int, bytes]]:
    return [(s.sample_id, s.data) for s in ds]


def _copy(config: drt.RemoteConfig, local_file: Path) -> Path:
    """The node cache's copy of the cache file ``local_file`` (named by its checksum: SHA-256 for shards, XXH3-128
    for the index and metadata of format 2)."""
    data = local_file.read_bytes()
    names = [f"sha256-{hashlib.sha256(data).hexdigest()}", f"xxh3_128-{xxh3_128_hex(data)}"]
    (found,) = [p for p in (Path(config.cache_dir) / "data").iterdir() if p.name in names]
    return found


def _damage(path: Path) -> None:
    """Flip a byte in the middle of ``path`` (its size stays: only its checksum tells)."""
    fd = os.open(path, os.O_RDWR)
    try:
        middle = os.fstat(fd).st_size // 2
        os.pwrite(fd, bytes([os.pread(fd, 1, middle)[0] ^ 0xFF]), middle)
    finally:
        os.close(fd)


def test_a_shard_copy_damaged_after_verification_is_fetched_again_then_named(runtime, tmp_path, moto_endpoint,
                                                                              proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=40, max_shard_bytes=400)
    config = remote_config(tmp_path)
    expected = _payloads(runtime.cached_dataset(local, reader_config=SEQ))
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert _payloads(ds) == expected  # every shard verified and in the node cache
    downloaded(ds)  # the reads took the downloads' bytes: the node cache's copies are renamed in after them
    shards = sorted((local / "shards").iterdir())
    copies = [_copy(config, s) for s in shards]
    _damage(copies[0])  # a disk fault, or a hand edit, after the copy was verified
    assert _payloads(ds) == expected  # found by the record checksums, fetched anew, read again
    downloaded(ds)
    assert copies[0].read_bytes() == shards[0].read_bytes()
    _damage(copies[0])  # damaged again after it was fetched anew: the node's disk is at fault, and named
    with pytest.raises(CacheCorruptError) as info:
        _payloads(ds)
    assert info.value.path == copies[0] and "damaged again" in info.value.reason, info.value
    fresh = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert _payloads(fresh) == expected  # another reader gets its own try


def test_a_damaged_metadata_copy_is_fetched_again(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    config = remote_config(tmp_path)
    expected = runtime.cached_dataset(local, reader_config=SEQ).get_metadata()
    first = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert first.get_metadata().equals(expected)
    copy = _copy(config, local / "metadata.arrow")
    _damage(copy)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert ds.get_metadata().equals(expected)
    assert copy.read_bytes() == (local / "metadata.arrow").read_bytes()


def test_a_manifest_copy_dated_in_the_future_expires(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path / "a", moto_endpoint, n=30)
    config = remote_config(tmp_path, manifest_ttl=3600.0)  # a copy of the right age is reused: not this one
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert len(ds) == 30
    (copy,) = (Path(config.cache_dir) / "small").iterdir()
    future = time.time() + 86400
    os.utime(copy, (future, future))  # a clock set back, or a copy from another machine
    (other,) = runtime.write_cache(ListSource(unique("other"), 50), tmp_path / "b",
                                   writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=256))
    upload_tree(other.path, moto_endpoint, url[len("s3://"):])  # the cache at the URL is replaced
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert len(ds) == 50


@pytest.mark.parametrize("how", ["emptied", "removed"])
def test_a_node_cache_emptied_or_removed_while_in_use_is_made_again(runtime, tmp_path, moto_endpoint, proxy, how):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=40, max_shard_bytes=400)
    config = remote_config(tmp_path)
    expected = _payloads(runtime.cached_dataset(local, reader_config=SEQ))
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert _payloads(ds) == expected
    downloaded(ds)
    assert _payloads(ds) == expected  # read from the node cache's maps
    directory = Path(config.cache_dir)
    if how == "removed":
        for _ in range(10):  # (a prefetch thread may be making a lock file meanwhile)
            shutil.rmtree(directory, ignore_errors=True)
            if not directory.exists():
                break
    else:
        for sub in directory.iterdir():
            shutil.rmtree(sub) if sub.is_dir() else sub.unlink()
    proxy.reset()
    assert _payloads(ds) == expected  # no map of a file gone from the cache is read: the shards come again
    assert proxy.requests["GET"] > 0
    downloaded(ds)
    shards = sorted((local / "shards").iterdir())
    assert all(_copy(config, s).read_bytes() == s.read_bytes() for s in shards)
    assert oct(directory.stat().st_mode & 0o777) == oct(0o700)  # made again, private
    again = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert _payloads(again) == expected  # a new open: its manifest copy and locks are made again too
