"""Failures at a URL are clear and lose nothing: bad credentials, a missing bucket, 503 storms (retried by the
project's retry policy), slow servers (configurable time-outs); no message names a credential or a query."""

from __future__ import annotations

import logging

import pytest
from conftest import ListSource, write_result
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, publish_local, remote_config, unique  # noqa: F401
from remote_servers import FaultProxy, StaticServer

import torch_drt as drt
from torch_drt.cache import CacheCorruptError

pytestmark = pytest.mark.timeout(120)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)
SECRET = "wJalrXUtnFEMI-not-a-real-secret"


def _open(runtime, url, proxy, tmp_path, **config):
    return runtime.cached_dataset(url, reader_config=SEQ, storage_options={**options(proxy), "key": "AKIAWRONG",
                                                                            "secret": SECRET},
                                  remote_config=remote_config(tmp_path, **config))


def test_bad_credentials_are_a_permission_error_that_shows_no_secret(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    proxy.allowed_keys = {"testing"}  # as S3: an unknown access key is refused with 403
    with pytest.raises(PermissionError) as err:
        _open(runtime, url, proxy, tmp_path)
    message = str(err.value)
    assert f"{url}/manifest.json" in message and "attempt" in message
    assert SECRET not in message and "AKIAWRONG" not in message and "127.0.0.1" not in message
    assert err.value.__cause__ is None and err.value.__context__ is None
    assert proxy.requests["GET"] == 0  # not retried: a refusal is permanent


def test_a_missing_bucket_names_the_url(runtime, tmp_path, proxy):
    with pytest.raises(CacheCorruptError, match="manifest is missing") as err:
        runtime.cached_dataset("s3://no-such-bucket/c", reader_config=SEQ, storage_options=options(proxy),
                               remote_config=remote_config(tmp_path))
    assert err.value.path == "s3://no-such-bucket/c/manifest.json"
    result = write_result(runtime, ListSource("x", 5), "s3://no-such-bucket/root",
                          writer_config=drt.WriterConfig(show_progress=False),
                          storage_options=options(proxy), remote_config=remote_config(tmp_path))
    assert isinstance(result, drt.CacheWriteError) and "s3://no-such-bucket/root/x" in result.message


def test_a_503_storm_is_ridden_out_by_retries_and_logged(runtime, tmp_path, moto_endpoint, proxy, caplog):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=60)
    proxy.storm = 6  # the next six requests get 503 SlowDown (the open's requests of the index and the metadata,
    # made with the manifest's and not retried, may take up to four of them: the manifest's request gets the rest)
    with caplog.at_level(logging.INFO, logger="torch_drt.sources"):
        ds = runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                                    remote_config=remote_config(tmp_path, retries=5))
        got = [s.data for s in ds]
    assert proxy.failed == 6 and proxy.storm == 0
    assert got == [s.data for s in runtime.cached_dataset(local, reader_config=SEQ)]
    retries = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    assert retries and all(url in m and "retry in" in m for m in retries)  # (botocore may probe the bucket too)


def test_a_storm_longer_than_the_retries_fails_naming_the_url_and_attempts(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=60)
    proxy.storm = 100
    with pytest.raises(OSError, match=rf"reading {url}/manifest.json failed after 3 attempt\(s\)"):
        runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                               remote_config=remote_config(tmp_path, retries=2))
    proxy.storm = 0
    (result,) = runtime.write_cache(ListSource(unique("storm"), 5), f"s3://{BUCKET}",
                                    writer_config=drt.WriterConfig(show_progress=False),
                                    storage_options=options(proxy), remote_config=remote_config(tmp_path, retries=1))
    assert isinstance(result, drt.CacheWriteSuccess)  # after the storm, writing works again


def test_a_storm_during_reads_and_uploads_loses_nothing(runtime, tmp_path, moto_endpoint, proxy):
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=300)
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=1), storage_options=options(proxy),
                                remote_config=remote_config(tmp_path, retries=6))
    proxy.storm = 3
    got = [b.data for b in ds.iter_batches(50)]
    assert got == [b.data for b in runtime.cached_dataset(local, reader_config=drt.ReaderConfig(seed=1))
                   .iter_batches(50)]
    proxy.storm = 5
    name = unique("stormy")
    (result,) = runtime.write_cache(ListSource(name, 100), f"s3://{BUCKET}",
                                    writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=200),
                                    storage_options=options(proxy), remote_config=remote_config(tmp_path, retries=6))
    assert isinstance(result, drt.CacheWriteSuccess), result
    assert drt.cache.open_cache(result.path, verify=True, storage_options=options(proxy),
                                remote_config=remote_config(tmp_path)).sample_count == 100


def test_time_outs_are_configurable(runtime, tmp_path, moto_endpoint, proxy):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    proxy.latency = 3.0
    with pytest.raises(OSError, match=rf"{url}/manifest.json failed after 2 attempt\(s\)"):
        runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                               remote_config=remote_config(tmp_path, timeout=0.3, retries=1))
    proxy.latency = 0.0


def test_http_server_errors_are_retried_and_missing_files_are_cache_errors(runtime, tmp_path):
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=256)
    (result,) = runtime.write_cache(ListSource("web", 40), tmp_path / "site", writer_config=config)
    server = StaticServer(tmp_path / "site")
    front = FaultProxy(server.url)
    try:
        front.storm = 2
        ds = runtime.cached_dataset(f"{front.url}/web", reader_config=SEQ, remote_config=remote_config(tmp_path))
        assert [s.data for s in ds] == [s.data for s in runtime.cached_dataset(result.path, reader_config=SEQ)]
        assert front.failed == 2
        (result.path / "shards" / "000001.bin").unlink()
        fresh = runtime.cached_dataset(f"{front.url}/web", reader_config=SEQ,
                                       remote_config=remote_config(tmp_path / "other"))
        with pytest.raises(CacheCorruptError, match="file is missing") as err:
            list(fresh)
        assert err.value.path == f"{front.url}/web/shards/000001.bin"
    finally:
        front.stop()
        server.stop()


def test_throttling_says_the_store_throttled_and_was_retried(runtime, tmp_path, moto_endpoint, proxy, caplog):
    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    proxy.storm = 100  # every request gets 503 SlowDown
    with caplog.at_level(logging.INFO, logger="torch_drt.sources"), pytest.raises(OSError) as err:
        runtime.cached_dataset(url, reader_config=SEQ, storage_options=options(proxy),
                               remote_config=remote_config(tmp_path, retries=2))
    message = str(err.value)
    assert "after 3 attempt(s)" in message and "throttled" in message and "busy" not in message, message
    retries = [r.getMessage() for r in caplog.records if "retry in" in r.getMessage()]
    assert retries and all("throttled" in m for m in retries)


_NO_CREDENTIALS = """
import sys
import torch_drt as drt
try:
    drt.DatasetRuntime(1).cached_dataset(sys.argv[1], reader_config=drt.ReaderConfig(seed=0),
                                         storage_options={"client_kwargs": {"endpoint_url": sys.argv[2]}},
                                         remote_config=drt.RemoteConfig(cache_dir=sys.argv[3], retries=5, backoff=0.01))
except Exception as e:
    print(type(e).__name__, "|", e)
"""


def test_missing_credentials_are_not_retried_and_say_how_to_supply_them(runtime, tmp_path, moto_endpoint, proxy):
    import os
    import subprocess
    import sys

    _local, url = publish_local(runtime, tmp_path, moto_endpoint, n=20)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", AWS_DEFAULT_REGION="us-east-1")
    proxy.reset()
    child = subprocess.run([sys.executable, "-c", _NO_CREDENTIALS, url, proxy.url, str(tmp_path / "nc")], env=env,
                           capture_output=True, text=True, timeout=120)
    kind, _, message = child.stdout.strip().partition(" | ")
    assert kind == "PermissionError", child.stdout + child.stderr[-2000:]
    assert "no credentials" in message and "storage_options" in message and "AWS_ACCESS_KEY_ID" in message
    assert "after 1 attempt(s)" in message  # not retried: waiting does not bring credentials
    assert "testing" not in message  # no secret (the parent's key) anywhere
    assert proxy.requests["GET"] + proxy.requests["HEAD"] == 0  # nothing unsigned was sent
