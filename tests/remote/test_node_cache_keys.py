"""Node-cache copies are keyed by where an object was read from (URL, endpoint, options), not by its URL alone:
the same bucket and key at another endpoint is another object."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ListSource
from remote_fixtures import BUCKET, moto_fixture, publish_local, remote_config, unique  # noqa: F401
from remote_servers import S3_ENV, make_bucket, s3_options, upload_tree

import torch_drt as drt
from torch_drt.sets.cache_set import is_cache_set, read_cache_set
from torch_drt.sets.cache_set_publish import publish_cache_set

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


@pytest.fixture(scope="module", name="other_endpoint")
def other_endpoint_fixture(tmp_path_factory, moto_endpoint) -> Iterator[str]:
    """A second moto server, in its own process (moto's objects are per process): another S3 endpoint."""
    port_file = tmp_path_factory.mktemp("moto2") / "port"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "remote_servers.py"), "moto", str(port_file)],
                            stdout=subprocess.DEVNULL, env={**os.environ, **S3_ENV})
    try:
        deadline = time.time() + 60
        while not (port_file.exists() and port_file.read_text()):
            assert proc.poll() is None and time.time() < deadline, "the second moto server did not start"
            time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port_file.read_text()}"
        make_bucket(endpoint, BUCKET)
        yield endpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def _ids(runtime, url, endpoint, config) -> list[int]:
    ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=s3_options(endpoint), remote_config=config)
    return [s.sample_id for s in ds]


def test_one_url_at_two_endpoints_reads_each_endpoints_cache(runtime, tmp_path, moto_endpoint, other_endpoint):
    _, url = publish_local(runtime, tmp_path / "a", moto_endpoint, n=30)
    (other,) = runtime.write_cache(_source("other", 50), tmp_path / "b",
                                   writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=256))
    assert isinstance(other, drt.CacheWriteSuccess), other
    upload_tree(other.path, other_endpoint, url[len("s3://"):])  # the same bucket and key, another endpoint
    config = remote_config(tmp_path)
    assert len(_ids(runtime, url, moto_endpoint, config)) == 30
    assert len(_ids(runtime, url, other_endpoint, config)) == 50  # not the first endpoint's manifest copy
    assert len(_ids(runtime, url, moto_endpoint, config)) == 30
    names = os.listdir(Path(config.cache_dir) / "small")
    assert len(names) == 2 and all("testing" not in n and "127.0.0.1" not in n for n in names), names


def test_a_set_at_one_endpoint_does_not_exist_at_another(runtime, tmp_path, moto_endpoint, other_endpoint):
    _, part = publish_local(runtime, tmp_path / "a", moto_endpoint, n=20)
    set_url = f"s3://{BUCKET}/{unique('set')}"
    config = remote_config(tmp_path)
    first = {"storage_options": s3_options(moto_endpoint), "remote_config": config}
    second = {"storage_options": s3_options(other_endpoint), "remote_config": config}
    assert not is_cache_set(set_url, **second)  # asked (and not remembered: missing) before anything is published
    publish_cache_set(set_url, [part], **first)
    assert is_cache_set(set_url, **first)
    assert not is_cache_set(set_url, **second)  # the first endpoint's set is not the second's
    _, other_part = publish_local(runtime, tmp_path / "b", other_endpoint, n=10)
    publish_cache_set(set_url, [other_part], **second)  # a fresh build there is not "already exists"
    assert read_cache_set(set_url, **second).sample_count == 10
    assert read_cache_set(set_url, **first).sample_count == 20


def _source(name: str, n: int) -> ListSource:
    return ListSource(unique(name), n)
