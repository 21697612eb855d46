"""Fixtures of the remote-cache tests: moto's S3 server, a fault proxy in front of it, caches published there.

Import the fixtures into a test module: ``from remote_fixtures import moto_fixture, proxy_fixture  # noqa: F401``
(they are named ``moto_endpoint`` and ``proxy``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ListSource
from remote_servers import FaultProxy, make_bucket, moto_server, s3_options, upload_tree

import torch_drt as drt

BUCKET = "caches"
_names = itertools.count()


@pytest.fixture(scope="module", name="moto_endpoint")
def moto_fixture() -> Iterator[str]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    with moto_server() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture(name="proxy")
def proxy_fixture(moto_endpoint: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of moto, fresh per test (counters at zero, no latency, no faults)."""
    p = FaultProxy(moto_endpoint)
    yield p
    p.stop()


def remote_config(tmp_path: Path, **overrides) -> drt.RemoteConfig:
    """A RemoteConfig with a node cache under ``tmp_path`` and quick retries."""
    values = {"cache_dir": str(tmp_path / "node-cache"), "cache_limit": 1 << 30, "backoff": 0.01, "max_backoff": 0.05,
              "retries": 3}
    return drt.RemoteConfig(**{**values, **overrides})


def unique(name: str) -> str:
    """A cache name not used yet in this process (moto keeps objects across tests)."""
    return f"{name}-{next(_names)}"


class SizedSource(ListSource):
    """A ListSource whose payloads are ``size`` bytes (payload bytes, not the index, dominate the cache)."""

    def __init__(self, name: str, n: int, size: int) -> None:
        super().__init__(name, n)
        self.size = size

    def __iter__(self) -> Iterator[drt.CacheInput]:
        for i, item in enumerate(super().__iter__()):
            yield drt.CacheInput(item.data + bytes([i % 256]) * (self.size - len(item.data)), item.metadata)


def publish_local(runtime: drt.DatasetRuntime, tmp_path: Path, endpoint: str, *, n: int = 300,
                  max_shard_bytes: int = 256, name: str = "src", payload_bytes: int | None = None,
                  **writer) -> tuple[Path, str]:
    """Write a ListSource cache locally and copy it to moto by hand; returns (local path, URL)."""
    name = unique(name)
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=max_shard_bytes, **writer)
    source = ListSource(name, n) if payload_bytes is None else SizedSource(name, n, payload_bytes)
    (result,) = runtime.write_cache(source, tmp_path / "local", writer_config=config)
    assert isinstance(result, drt.CacheWriteSuccess), result
    upload_tree(result.path, endpoint, f"{BUCKET}/{name}")
    return result.path, f"s3://{BUCKET}/{name}"


def downloaded(ds: drt.CachedDataset) -> None:
    """Wait until the node cache holds every shard of ``ds`` (synced, verified, renamed): a read that waited for
    a download of its own process got the bytes as they came, before that."""
    for file in ds.reader._caches[0].shards:
        file.fetch()


def options(proxy: FaultProxy) -> dict:
    """s3fs options reaching moto through ``proxy``."""
    return s3_options(proxy.url)


def wait_idle(prefetcher, timeout: float = 30) -> None:
    """Wait until ``prefetcher`` has nothing running, urgent or due (its plan followed as far as it goes)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with prefetcher._cond:
            if not prefetcher._running and not prefetcher._urgent and prefetcher._next() is None:
                return
        time.sleep(0.02)
    raise AssertionError("the prefetcher did not settle")
