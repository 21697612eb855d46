"""Opening and reading caches at URLs (S3 through moto and a proxy, HTTP, memory://, file://): same samples as
the local cache, a cheap open, range reads verified record by record, verification over the network."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap

import fsspec
import numpy as np
import pytest
from conftest import ListSource
from remote_fixtures import downloaded, moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401
from remote_servers import StaticServer

import torch_drt as drt
from torch_drt.cache import CacheCorruptError, CacheReader, open_cache
from torch_drt.checksums import xxh3_128_hex
from torch_drt.locations import backend_for
from torch_drt.locations._open_reads import OpenReads
from torch_drt.locations.remote_store import RemoteStore
from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(120)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _payloads(ds) -> list[tuple[int, bytes, dict]]:
    return [(s.sample_id, s.data, s.metadata) for s in ds]


def test_s3_cache_reads_as_the_local_one_and_opens_cheaply(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint)
    config = remote_config(tmp_path)
    remote = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    opened = dict(proxy.requests)
    assert opened == {"GET": 3}, opened  # manifest, index, metadata: nothing listed, no shard touched
    assert sorted(proxy.gets) == sorted(f"/{url[5:]}/{f}" for f in ("manifest.json", "index.bin", "metadata.arrow"))
    expected = _payloads(runtime.cached_dataset(local, reader_config=SEQ))
    assert _payloads(remote) == expected
    assert remote.get_metadata().equals(runtime.cached_dataset(local, reader_config=SEQ).get_metadata())
    proxy.reset()
    again = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert _payloads(again) == expected
    assert proxy.requests["GET"] == 0  # the node cache holds the manifest (for its TTL), index, metadata, shards


def _maps_under(directory) -> collections.Counter:
    """The files under ``directory`` this process maps, with how many maps each has."""
    counts: collections.Counter = collections.Counter()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().startswith(str(directory)):
                counts[parts[5].strip()] += 1
    return counts


def test_two_datasets_of_one_cache_read_through_one_map_per_file(runtime, tmp_path, moto_endpoint, proxy):
    """A cache opened twice in a process (a validation loader, a reopen to resume) maps each file once."""
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=60, max_shard_bytes=200)
    config = remote_config(tmp_path, open_shards=64)
    first, second = (runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                            remote_config=config) for _ in range(2))
    expected = _payloads(runtime.cached_dataset(local, reader_config=SEQ))
    assert _payloads(first) == expected  # (read from the downloads' bytes as they came: nothing mapped yet)
    downloaded(first)
    assert _payloads(first) == expected  # mapped now
    assert _payloads(second) == expected
    mapped = _maps_under(tmp_path / "node-cache")
    assert len(mapped) > len(first.layouts[0].shards)  # every shard, and the index
    assert set(mapped.values()) == {1}
    first.reader.close()  # the other dataset's maps stay usable
    assert _payloads(second) == expected


def test_a_process_keeps_at_most_open_shards_idle_maps(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=60, max_shard_bytes=200)
    config = remote_config(tmp_path, open_shards=2)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    expected = _payloads(runtime.cached_dataset(local, reader_config=SEQ))
    assert _payloads(ds) == expected  # (from the downloads' bytes as they came)
    downloaded(ds)
    assert _payloads(ds) == expected  # from the node cache's maps
    assert len(ds.layouts[0].shards) > 2
    shards = {f.key for f in ds.reader._caches[0].shards}
    mapped = [p for p in _maps_under(tmp_path / "node-cache") if p.rsplit("/", 1)[1] in shards]
    assert 1 <= len(mapped) <= 2  # the last shards read stay mapped, the others were unmapped


def test_the_open_of_a_cache_new_to_the_node_is_one_round_trip(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint)
    proxy.latency = 0.3  # each request is in flight long enough for the next one to start meanwhile
    config = remote_config(tmp_path)
    runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert proxy.requests["GET"] == 3
    assert proxy.max_gets_at_once == 3  # the manifest, the index and the metadata together
    first_answer = min(answered for _, answered, *_ in proxy.timeline)
    assert all(arrived < first_answer for arrived, *_ in proxy.timeline), proxy.timeline  # one round


def test_a_node_that_read_the_manifest_before_refetches_only_the_manifest(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint)
    config = remote_config(tmp_path, manifest_ttl=0)  # every open fetches the manifest again
    runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    proxy.reset()
    runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    assert set(proxy.gets) == {f"/{url[5:]}/manifest.json"}  # the index and metadata are the node's


def test_copies_fetched_with_the_manifest_are_used_once_and_only_when_they_match(runtime, tmp_path, moto_endpoint,
                                                                                  proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint)
    store = RemoteStore(url, options(proxy), remote_config(tmp_path))
    proxy.latency = 0.2
    reads = OpenReads()
    wanted = ["index.bin", "metadata.arrow", "missing.bin"]
    node = NodeCache(tmp_path / "node", 1 << 30)
    manifest = reads.fetch_with(store, "manifest.json", 1 << 20, wanted, node)
    assert manifest == (local / "manifest.json").read_bytes()
    for name in ("index.bin", "metadata.arrow"):  # in the node cache before the manifest copy is (other processes)
        data = (local / name).read_bytes()
        assert node.has(f"xxh3_128-{xxh3_128_hex(data)}", len(data))
    assert proxy.requests["GET"] == proxy.max_gets_at_once == 4  # all at once
    index = (local / "index.bin").read_bytes()
    assert reads.take("index.bin", ("xxh3_128", "0" * 32), "x") is None  # another version's: fetched again
    assert reads.take("index.bin", ("xxh3_128", xxh3_128_hex(index)), "x") is None  # (gone once taken)
    metadata = (local / "metadata.arrow").read_bytes()
    assert reads.take("metadata.arrow", ("xxh3_128", xxh3_128_hex(metadata)), "x") == metadata
    assert reads.take("missing.bin", ("xxh3_128", "0" * 32), "x") is None
    assert reads.fetch_with(store, "nothing/manifest.json", 1 << 20, wanted) is None  # a missing manifest


def test_the_shards_a_read_waits_for_download_at_once(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=60, max_shard_bytes=100)
    config = remote_config(tmp_path, prefetch_shards=4)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    reader = ds.reader
    rows = np.arange(60, dtype=np.int64)
    shards = np.unique(reader.shard_groups(np.zeros(60, dtype=np.int64), rows))
    assert len(shards) >= 4
    proxy.reset()
    proxy.latency = 0.3
    got = reader.read_many(np.zeros(60, dtype=np.int64), rows)  # no plan: every shard is a miss of this read
    assert [bytes(d) for d in got] == [bytes(s.data) for s in runtime.cached_dataset(local, reader_config=SEQ)]
    assert proxy.max_gets_at_once >= 3, proxy.stats()


def test_a_second_process_opens_and_reads_from_the_node_cache(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint)
    config = remote_config(tmp_path)
    first = _payloads(runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                             remote_config=config))
    proxy.reset()
    code = textwrap.dedent(f"""
        import json, torch_drt as drt
        ds = drt.DatasetRuntime(1).cached_dataset({url!r}, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
            storage_options={options(proxy)!r}, remote_config=drt.RemoteConfig(cache_dir={config.cache_dir!r}))
        print(json.dumps([s.data.hex() for s in ds]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [d.hex() for _, d, _ in first]
    assert proxy.requests["GET"] == 0


@pytest.mark.parametrize("mode", ["shards", "ranges"])
def test_both_read_modes_return_the_same_shuffled_batches(runtime, tmp_path, moto_endpoint, proxy, mode):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=400)
    config = remote_config(tmp_path, read_mode=mode)
    shuffled = drt.ReaderConfig(seed=3)
    remote = runtime.cached_dataset(url, reader_config=shuffled, storage_options=options(proxy), remote_config=config)
    mine = [b.data for b in remote.iter_batches(64)]
    assert mine == [b.data for b in runtime.cached_dataset(local, reader_config=shuffled).iter_batches(64)]
    kept = list((tmp_path / "node-cache" / "data").iterdir())
    shards = [p for p in kept if p.name.startswith("sha256-")]
    if mode == "ranges":
        assert shards == []  # no local shard copy: every batch came by byte ranges
    assert proxy.requests["GET"] > 3


def test_range_reads_are_coalesced_and_many_in_flight(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=400, max_shard_bytes=4096)
    config = remote_config(tmp_path, read_mode="ranges", range_gap=1 << 20)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    proxy.reset()
    batch = ds.read_rows(np.arange(0, 400, 3))  # 134 records spread over every shard
    shards = len(open_cache(local).shards)
    assert proxy.requests["GET"] <= shards  # one request per shard, not one per record
    assert batch.data == ds.reader.read_many(np.zeros(134, np.int32), np.arange(0, 400, 3))


def _flip_remote(endpoint: str, key: str, offset: int) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
    data = bytearray(fs.cat_file(key))
    data[offset] ^= 0xFF
    fs.pipe_file(key, bytes(data))


@pytest.mark.parametrize("mode", ["shards", "ranges"])
def test_a_damaged_remote_shard_is_a_cache_corrupt_error_naming_its_url(runtime, tmp_path, moto_endpoint, proxy,
                                                                         mode):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=50, max_shard_bytes=1 << 20)
    _flip_remote(moto_endpoint, f"{url[5:]}/shards/000000.bin", 3)
    config = remote_config(tmp_path, read_mode=mode)
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy), remote_config=config)
    with pytest.raises(CacheCorruptError) as err:
        list(ds)
    assert str(err.value.path).startswith(f"{url}/shards/000000.bin")
    assert "127.0.0.1" not in str(err.value) and "testing" not in str(err.value)
    if mode == "shards":  # the whole-shard download is refused too (SHA-256), and nothing is kept
        backend = ds.layouts[0].backend
        with pytest.raises(CacheCorruptError, match="sha256 of the downloaded file"):
            ds.reader._caches[0].shards[0].fetch()
        assert not any(p.name.startswith("sha256-") for p in (tmp_path / "node-cache" / "data").iterdir())
        tmp = tmp_path / "node-cache" / "tmp"
        assert not (tmp.exists() and any(tmp.iterdir()))  # the refused download left no partial file behind
        assert backend.node.usage() == sum(p.stat().st_size for p in (tmp_path / "node-cache" / "data").iterdir())


def test_a_missing_remote_shard_and_a_missing_cache_name_their_url(runtime, tmp_path, moto_endpoint, proxy):
    import s3fs

    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=50)
    s3fs.S3FileSystem(client_kwargs={"endpoint_url": moto_endpoint}, skip_instance_cache=True).rm_file(
        f"{url[5:]}/shards/000001.bin"
    )
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                remote_config=remote_config(tmp_path))
    with pytest.raises(CacheCorruptError, match="file is missing") as err:
        list(ds)
    assert err.value.path == f"{url}/shards/000001.bin"
    with pytest.raises(CacheCorruptError, match="manifest is missing") as err:
        runtime.cached_dataset(url + "-nothing-here", reader_config=SEQ, storage_options=options(proxy),
                               remote_config=remote_config(tmp_path))
    assert err.value.path == f"{url}-nothing-here/manifest.json"


def test_verify_streams_every_file_through_sha256(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=80)
    backend = backend_for(url, options(proxy), remote_config(tmp_path))
    assert open_cache(backend, verify=True).sample_count == 80
    _flip_remote(moto_endpoint, f"{url[5:]}/shards/000001.bin", 0)
    with pytest.raises(CacheCorruptError, match="checksum mismatch") as err:
        open_cache(backend_for(url, options(proxy), remote_config(tmp_path)), verify=True)
    assert err.value.path == f"{url}/shards/000001.bin"


def test_http_caches_read_through_byte_ranges(runtime, tmp_path):
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=256)
    (result,) = runtime.write_cache(ListSource("web", 120), tmp_path / "site", writer_config=config)
    server = StaticServer(tmp_path / "site")
    try:
        for mode in ("shards", "ranges"):
            ds = runtime.cached_dataset(f"{server.url}/web", reader_config=drt.ReaderConfig(seed=1),
                                        remote_config=remote_config(tmp_path / mode, read_mode=mode))
            local_ds = runtime.cached_dataset(result.path, reader_config=drt.ReaderConfig(seed=1))
            assert [b.data for b in ds.iter_batches(16)] == [b.data for b in local_ds.iter_batches(16)]
        with pytest.raises(CacheCorruptError, match="manifest is missing"):
            runtime.cached_dataset(f"{server.url}/absent", reader_config=SEQ, remote_config=remote_config(tmp_path))
    finally:
        server.stop()


def test_memory_and_file_urls(runtime, tmp_path):
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=512)
    (result,) = runtime.write_cache(ListSource("m", 60), tmp_path / "c", writer_config=config)
    fs = fsspec.filesystem("memory")
    for path in result.path.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/remote-test/m/{path.relative_to(result.path).as_posix()}", path.read_bytes())
    expected = _payloads(runtime.cached_dataset(result.path, reader_config=SEQ))
    mem = runtime.cached_dataset("memory://remote-test/m", reader_config=SEQ, remote_config=remote_config(tmp_path))
    assert _payloads(mem) == expected
    by_file_url = runtime.cached_dataset(f"file://{result.path}", reader_config=SEQ)
    assert _payloads(by_file_url) == expected
    assert by_file_url.layouts[0].backend.stats_cheaply  # a file:// URL is the local, memory-mapped backend


def test_readers_pickle_with_their_options_and_show_no_secret(runtime, tmp_path, moto_endpoint, proxy):
    import pickle

    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    secret = {**options(proxy), "key": "testing", "secret": "testing"}
    reader = CacheReader.open([backend_for(url, secret, remote_config(tmp_path))])
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.read(0, 3) == reader.read(0, 3)
    assert "testing" not in repr(reader.layouts[0].backend) and "key" in repr(reader.layouts[0].backend)


def test_urls_with_credentials_or_queries_are_refused_redacted(runtime):
    for url in ("s3://user:pw@bucket/c", "https://host/c?X-Amz-Signature=pw", "https://host/c#pw"):
        with pytest.raises(ValueError, match="must not carry credentials") as err:
            runtime.cached_dataset(url, reader_config=SEQ)
        assert "pw" not in str(err.value)
