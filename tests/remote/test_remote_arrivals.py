"""A read waiting for a download of its own process takes the shard's bytes as they come (``_arrivals``), before
the node cache's sync, SHA-256 and rename; those bytes are trusted no further than the reader's record checks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.cache import CacheCorruptError
from torch_drt.locations._arrivals import Arrivals, arrivals

pytestmark = pytest.mark.timeout(120)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _waiter(box: Arrivals, key: str, got: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: got.append(box.wait(key)), daemon=True)
    thread.start()
    return thread


def test_a_wait_gets_the_bytes_a_fetch_of_this_process_posts():
    box, got, release = Arrivals(), [], threading.Event()
    fetching = threading.Event()

    def fetch() -> None:
        with box.expecting("sha256-a"):
            fetching.set()
            box.post("sha256-a", b"shard bytes")
            release.wait(30)  # the fetch goes on (its sync, check, rename) while the reads take the bytes

    fetcher = threading.Thread(target=fetch, daemon=True)
    fetcher.start()
    assert fetching.wait(30)
    _waiter(box, "sha256-a", got).join(30)
    assert got == [b"shard bytes"]
    release.set()
    fetcher.join(30)
    assert box.wait("sha256-a") is None  # the fetch is over: the node cache's copy is read now


def test_the_bytes_are_waited_for_only_while_a_read_waits():
    box, got = Arrivals(), []
    assert not box.waited("sha256-w")
    with box.expecting("sha256-w"):
        assert not box.waited("sha256-w")  # a fetch in flight, nobody reading
        waiter = _waiter(box, "sha256-w", got)
        deadline = time.monotonic() + 60
        while not box.waited("sha256-w"):
            assert time.monotonic() < deadline, "the waiting read was not seen"
            time.sleep(0.01)
        box.post("sha256-w", b"bytes")
        waiter.join(30)
        assert got == [b"bytes"] and not box.waited("sha256-w")  # received: nobody waits any more


def test_a_wait_ends_with_none_when_the_fetch_ends_without_bytes():
    box, got = Arrivals(), []
    assert box.wait("sha256-b") is None  # nothing of it is in flight here
    box.post("sha256-b", b"ignored")  # no fetch expects it: nothing is kept
    assert box.wait("sha256-b") is None
    with box.expecting("sha256-b"):  # a fetch that finds the file local, or waits for another process's
        waiter = _waiter(box, "sha256-b", got)
    waiter.join(30)
    assert got == [None]


def test_a_wait_for_a_fetch_still_queued_waits_for_it_to_start():
    box, got, queued = Arrivals(), [], threading.Event()
    queued.set()
    waiter = threading.Thread(target=lambda: got.append(box.wait("sha256-c", queued.is_set)), daemon=True)
    waiter.start()
    with box.expecting("sha256-c"):  # the queued fetch starts (whenever the waiter asked meanwhile) ...
        queued.clear()
        box.post("sha256-c", b"late")  # ... and receives the bytes
        waiter.join(30)
    assert got == [b"late"]
    assert box.wait("sha256-c", queued.is_set) is None  # nothing queued nor in flight


def test_damaged_bytes_from_a_download_in_flight_are_a_cache_corrupt_error(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=50, max_shard_bytes=1 << 20)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                remote_config=remote_config(tmp_path, retries=0))
    (shard,) = ds.reader._caches[0].shards
    proxy.storm = 1 << 20  # every request fails: only the bytes posted below come
    with arrivals().expecting(shard.key):
        good = proxy_free_bytes(moto_endpoint, url)
        damaged = bytearray(good)
        damaged[len(damaged) // 2] ^= 0xFF
        arrivals().post(shard.key, bytes(damaged))
        with pytest.raises(CacheCorruptError) as err:
            ds.reader.read_many(np.zeros(50, dtype=np.int64), np.arange(50))
    assert str(err.value.path).startswith(f"{url}/shards/000000.bin")
    assert "127.0.0.1" not in str(err.value) and "testing" not in str(err.value)
    with arrivals().expecting(shard.key):
        arrivals().post(shard.key, good)  # the right bytes read as the cache's records
        got = ds.reader.read_many(np.zeros(50, dtype=np.int64), np.arange(50))
    proxy.storm = 0
    assert [bytes(d) for d in got] == [bytes(s.data) for s in ds]


def proxy_free_bytes(endpoint: str, url: str) -> bytes:
    import s3fs

    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True).cat_file(
        f"{url[5:]}/shards/000000.bin")
