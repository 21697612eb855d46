"""A download's ``requested`` callback comes once its request is sent (the S3 client's ``before-send`` event), not
when the download asks the client: a fork that waits for the first batches' requests (``_warm_start``) no longer
goes on while the client's event loop is still signing them (the fork then held the GIL, and the requests went out
after it). Real moto behind the fault proxy, the client slowed by a handler of its own ``before-sign`` event."""

from __future__ import annotations

import os
import time

import pytest
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.locations._request_sent import announced
from torch_drt.nodecache import _warm_start

pytestmark = pytest.mark.timeout(120)
_EVENTS: list[str] = []  # what the client did, in order (a forked child sees its parent's, as at the fork)


def _open(runtime, url, proxy, tmp_path):
    ds = runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=5, shard_window=2),
                                storage_options=options(proxy), remote_config=remote_config(tmp_path))
    store = ds.reader._caches[0].shards[0].backend.store
    return ds, store.fs._s3.meta.events  # (the open's requests made the client)


def _slow_signing(**kwargs) -> None:
    _EVENTS.append("signing")
    time.sleep(0.1)  # the event loop is busy (a loaded machine): the request is not sent yet


def _sending(**kwargs) -> None:
    _EVENTS.append(f"sending {kwargs['request'].url.rsplit('/', 1)[-1]}")


def test_the_callback_comes_after_the_request_is_signed_and_sent(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=60, max_shard_bytes=1024, payload_bytes=64)
    ds, events = _open(runtime, url, proxy, tmp_path)
    file = ds.reader._caches[0].shards[0]
    events.register("before-sign.s3.GetObject", _slow_signing)
    _EVENTS.clear()
    try:
        assert file.fetch(requested=lambda: _EVENTS.append("requested"))
    finally:
        events.unregister("before-sign.s3.GetObject", _slow_signing)
    assert _EVENTS[:2] == ["signing", "requested"]  # (before: requested first, then the signing)
    assert file.present() and proxy.gets[f"/{url[5:]}/{file.rel}"] == 1


def test_a_fork_waits_until_the_first_batches_requests_are_sent(runtime, tmp_path, moto_endpoint, proxy,
                                                                monkeypatch):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=200, max_shard_bytes=1024, payload_bytes=64)
    ds, events = _open(runtime, url, proxy, tmp_path)
    files = list(ds.reader._caches[0].shards[:3])
    monkeypatch.setattr(_warm_start, "FORK_WAIT_S", 60.0)  # "before the fork" whatever the machine's load
    events.register("before-sign.s3.GetObject", _slow_signing)
    events.register("before-send.s3.GetObject", _sending)
    _EVENTS.clear()
    try:
        _warm_start.fetch_now(files, threads=3)
        pid = os.fork()
        if pid == 0:  # the child: the requests its parent had sent at the fork
            os._exit(10 + sum(e.startswith("sending ") for e in _EVENTS))
        _, status = os.waitpid(pid, 0)
        deadline = time.monotonic() + 30
        while _warm_start.running() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        events.unregister("before-sign.s3.GetObject", _slow_signing)
        events.unregister("before-send.s3.GetObject", _sending)
    assert os.waitstatus_to_exitcode(status) == 13  # all three sent before the fork (before: 0 or 1)
    assert all(f.present() for f in files)
    assert sorted(e for e in _EVENTS if e.startswith("sending ")) == sorted(f"sending {f.rel.rsplit('/', 1)[-1]}"
                                                                             for f in files)


def test_a_client_that_cannot_tell_calls_back_at_once():
    called = []
    with announced(object(), lambda: called.append(1)):  # no S3 client (another store, or not made yet)
        assert called == [1]
    with announced(object(), None):
        pass
