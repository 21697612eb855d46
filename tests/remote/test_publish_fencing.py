"""Fenced publishing: a writer stopped (SIGSTOP) past ``stale_writer_after`` loses its claim to a successor; once
resumed (SIGCONT) it fails with StaleWriterError before its next write, never overwrites the successor's objects
and never publishes over them. Real writer processes on moto S3, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401

import torch_drt as drt
from torch_drt.cache import open_cache
from torch_drt.locations.remote_store import RemoteStore

pytestmark = pytest.mark.timeout(180)
STALE = 2.0  # seconds: the writers' stale_writer_after


def _writer(name: str, n: int, opts: dict, pause: str) -> str:
    """A child that publishes ``ListSource(name, n)`` and stops itself (SIGSTOP) at ``pause``: ``"upload-3"``
    after its third upload, ``"manifest"`` just before its manifest is written, ``""`` never."""
    return textwrap.dedent(f"""
        import os, signal, time
        import torch_drt as drt
        from conftest import ListSource
        from torch_drt.locations.remote_store import RemoteStore

        pause = {pause!r}
        upload, uploads = RemoteStore.upload, []

        def upload_then_stop(self, local, rel, **kwargs):
            done = upload(self, local, rel, **kwargs)
            uploads.append(rel)
            if pause == "upload-3" and len(uploads) == 3:
                os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(0.5)  # the other threads stop when the signal reaches them: this one waits for it
            return done

        RemoteStore.upload = upload_then_stop
        for verb in ("put_new", "put"):  # the manifest's write, by whichever path the code takes
            def stop_first(self, rel, *args, _original=getattr(RemoteStore, verb), **kwargs):
                if pause == "manifest" and rel == "manifest.json":
                    os.kill(os.getpid(), signal.SIGSTOP)
                    time.sleep(0.5)
                return _original(self, rel, *args, **kwargs)
            setattr(RemoteStore, verb, stop_first)
        try:
            from torch_drt.locations import _conditional
        except ImportError:  # releases before fencing wrote the manifest with put_new
            _conditional = None
        if _conditional is not None:
            put_if = _conditional.put_if
            def put_if_stop_first(store, rel, *args, **kwargs):
                if pause == "manifest" and rel == "manifest.json":
                    os.kill(os.getpid(), signal.SIGSTOP)
                    time.sleep(0.5)
                return put_if(store, rel, *args, **kwargs)
            _conditional.put_if = put_if_stop_first
            from torch_drt.locations import remote_publish
            remote_publish.put_if = put_if_stop_first
        config = drt.RemoteConfig(upload_concurrency=1, stale_writer_after={STALE}, backoff=0.01)
        try:
            (result,) = drt.DatasetRuntime(1).write_cache(ListSource({name!r}, {n}), "s3://{BUCKET}",
                writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=300), storage_options={opts!r},
                remote_config=config)
        except getattr(drt, "CacheSourcesError", ()) as e:  # torch_drt raises a failed write (older releases: a value)
            (result,) = e.results
        print("RESULT", type(result).__name__, getattr(result, "message", ""))
    """)


def _start(name: str, n: int, opts: dict, pause: str) -> subprocess.Popen:
    tests_dir = os.path.dirname(os.path.dirname(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), tests_dir])}
    return subprocess.Popen([sys.executable, "-c", _writer(name, n, opts, pause)], env=env, text=True,
                            cwd=tests_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_stopped(proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)
        if pid and os.WIFSTOPPED(status):
            return
        assert pid == 0, f"the writer exited instead of stopping: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError("the writer did not reach its pause")


def _finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    (line,) = [x for x in out.splitlines() if x.startswith("RESULT")]
    return line


def _resume(proc: subprocess.Popen) -> str:
    os.kill(proc.pid, signal.SIGCONT)
    return _finish(proc)


def _assert_published(url: str, proxy, tmp_path, n: int) -> None:
    config = remote_config(tmp_path / unique("check"))  # a fresh node cache: every byte read from the store
    layout = open_cache(url, verify=True, storage_options=options(proxy), remote_config=config)
    assert layout.sample_count == n
    expected = {"manifest.json", "index.bin", "metadata.arrow", *(f"shards/{s}" for s, _ in layout.shards)}
    assert set(RemoteStore(url, options(proxy)).list()) == expected  # nothing of the stale writer is left
    ds = drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                              storage_options=options(proxy), remote_config=config)
    assert len(ds) == n and [s.metadata["label"] for s in ds] == list(range(n))


def _stale(line: str) -> bool:
    return line.startswith("RESULT CacheWriteError") and "taken over" in line


def test_a_writer_stopped_mid_upload_fails_when_resumed_and_leaves_its_successors_cache_whole(tmp_path, proxy):
    name = unique("fenced-upload")
    url = f"s3://{BUCKET}/{name}"
    stale = _start(name, 200, options(proxy), "upload-3")
    try:
        _wait_stopped(stale)
        time.sleep(STALE + 0.5)  # its claim is stale now
        assert _finish(_start(name, 60, options(proxy), "")) == "RESULT CacheWriteSuccess "
        _assert_published(url, proxy, tmp_path, 60)
        line = _resume(stale)
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.communicate()
    assert _stale(line), line
    _assert_published(url, proxy, tmp_path, 60)  # not one of the successor's objects was overwritten


def test_a_writer_stopped_before_its_manifest_publishes_nothing_over_its_successor(tmp_path, proxy):
    name = unique("fenced-manifest")
    url = f"s3://{BUCKET}/{name}"
    stale = _start(name, 200, options(proxy), "manifest")
    successor = None
    try:
        _wait_stopped(stale)
        time.sleep(STALE + 0.5)
        successor = _start(name, 60, options(proxy), "manifest")  # takes over; stopped before its own manifest
        _wait_stopped(successor)
        line = _resume(stale)
        assert _stale(line), line
        assert _resume(successor) == "RESULT CacheWriteSuccess "
    finally:
        for proc in (stale, successor):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.communicate()
    _assert_published(url, proxy, tmp_path, 60)
