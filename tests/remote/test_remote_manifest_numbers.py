"""Hostile numbers and empty objects at a URL (issue 22): a typed error naming the file or field, at once (no
retries), before anything is allocated; nothing left behind in the node cache, no descriptor leaked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.locations.remote_store import RemoteStore

pytestmark = pytest.mark.timeout(120)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _open_and_read(url: str, proxy, config: drt.RemoteConfig) -> None:
    ds = drt.DatasetRuntime(1).cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                              remote_config=config)
    list(ds)


def _open_in(directory: Path) -> list[str]:
    """The files under ``directory`` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def _left_over(node_cache: Path) -> list[str]:
    """Files of the node cache other than its locks, the manifests it keeps and what it verified."""
    return sorted(str(p.relative_to(node_cache)) for p in node_cache.rglob("*")
                  if p.is_file() and p.parent.name not in ("locks", "small", "data") and not p.name.startswith("."))


@pytest.mark.parametrize(("field", "value", "named"), [
    ("sample_count", 2**40, "sample_count"),
    ("sample_count", 2**62, "sample_count"),
    ("shard byte_len", 2**64, "byte_len"),
    ("index byte_len", 2**64, "byte_len"),
    ("max_record_bytes", 2**64, "max_record_bytes"),
])
def test_a_manifest_number_out_of_range_is_one_typed_error_naming_the_field(runtime, tmp_path, proxy, field, value,
                                                                           named):
    _, url = publish_local(runtime, tmp_path, proxy.upstream, n=40)
    store = RemoteStore(url, options(proxy))
    manifest = json.loads(store.read("manifest.json"))
    if field == "shard byte_len":
        manifest["shards"][0]["byte_len"] = value
    elif field == "index byte_len":
        manifest["files"]["index.bin"]["byte_len"] = value
    else:
        manifest[field] = value
    store.put("manifest.json", json.dumps(manifest).encode())
    config = remote_config(tmp_path)
    with pytest.raises(drt.CacheCorruptError, match=named) as caught:
        _open_and_read(url, proxy, config)
    assert f"{url}/manifest.json" in str(caught.value)
    assert _left_over(Path(config.cache_dir)) == []
    assert _open_in(Path(config.cache_dir)) == []


@pytest.mark.parametrize("rel", ["manifest.json", "shards/000000.bin"])
def test_an_empty_object_is_a_typed_error_at_once_naming_its_url(runtime, tmp_path, proxy, rel):
    _, url = publish_local(runtime, tmp_path, proxy.upstream, n=40)
    RemoteStore(url, options(proxy)).put(rel, b"")
    proxy.reset()
    config = remote_config(tmp_path, retries=9)
    with pytest.raises(drt.CacheCorruptError) as caught:
        _open_and_read(url, proxy, config)
    assert f"{url}/{rel}" in str(caught.value) and "attempt" not in str(caught.value)
    path = f"/{BUCKET}/{url.rsplit('/', 1)[1]}/{rel}"
    assert proxy.gets[path] <= 4, proxy.gets  # read at most by ranges and by download, never retried (10 times)
