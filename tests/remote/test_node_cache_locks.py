"""A process stopped (SIGSTOP, as a scheduler's suspend does) while it holds a node-cache download lock does not
block the node: a waiter goes on after ``lock_wait`` seconds, downloads the file itself and logs the holder's pid."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from torch_drt.cache import CacheCorruptError
from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(120)
DATA = b"shard-bytes-" * 100


def _hold(directory: str, marker: Path) -> None:
    """Another process downloading ``sha256-k``: it is stopped while it holds the file's lock."""

    def download(fd: int) -> None:
        os.pwrite(fd, DATA[:500], 0)
        marker.write_text("downloading")  # the test stops this process now, the lock held
        while marker.read_text() != "go on":  # ... and lets it go on once another process took the file
            time.sleep(0.01)
        os.pwrite(fd, DATA[500:], 500)

    NodeCache(directory, 1 << 20).fetch("sha256-k", len(DATA), download, lambda path: None, "s3://b/k")


def _check(path: Path) -> None:
    if path.read_bytes() != DATA:
        raise CacheCorruptError(path, "not the expected bytes")


def test_a_stopped_lock_holder_does_not_block_the_others(tmp_path, caplog):
    directory, marker = tmp_path / "node", tmp_path / "marker"
    NodeCache(directory, 1 << 20)  # made by this process: the child finds it private and its own user's
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(str(directory), marker))
    holder.start()  # forked, not a fresh interpreter: its subject is the lock it holds, not how it starts
    done = threading.Event()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert holder.is_alive() and time.monotonic() < deadline, "the holder did not start its download"
            time.sleep(0.02)
        os.kill(holder.pid, signal.SIGSTOP)  # suspended while it holds the file's download lock
        cache = NodeCache(directory, 1 << 20, lock_wait=0.2)

        def fetch() -> None:
            cache.fetch("sha256-k", len(DATA), lambda fd: os.pwrite(fd, DATA, 0), _check, "s3://b/k")
            done.set()

        with caplog.at_level(logging.WARNING, logger="torch_drt.cache"):
            waiter = threading.Thread(target=fetch, daemon=True)
            waiter.start()
            waiter.join(30)
            assert done.is_set(), "the waiter is still blocked by the stopped process's lock"
        assert cache.path("sha256-k").read_bytes() == DATA
        assert f"pid {holder.pid}" in caplog.text, caplog.text
    finally:
        marker.write_text("go on")
        os.kill(holder.pid, signal.SIGCONT)
        holder.join(60)
    assert holder.exitcode == 0  # resumed, it finishes its own download harmlessly
    assert cache.path("sha256-k").read_bytes() == DATA
    assert os.listdir(directory / "tmp") == []


def _hold_download(cache: NodeCache, release: threading.Event, downloads: list[str]) -> threading.Thread:
    """A thread of this process that downloads ``sha256-k`` and holds its lock until ``release`` is set."""

    def download(fd: int) -> None:
        downloads.append(threading.current_thread().name)
        assert release.wait(60)
        os.pwrite(fd, DATA, 0)

    holder = threading.Thread(target=cache.fetch, args=("sha256-k", len(DATA), download, _check, "s3://b/k"),
                              name="holder", daemon=True)
    holder.start()
    deadline = time.monotonic() + 30
    while not downloads:
        assert time.monotonic() < deadline, "the holder did not start its download"
        time.sleep(0.01)
    return holder


def test_a_thread_waits_for_another_threads_download_without_polling(tmp_path, monkeypatch):
    """A read waiting for its shard while the prefetcher (a thread of its process) downloads it queues on an
    in-process lock: it wakes when the download is done, with no sleep-and-retry loop (which added up to 50 ms to
    every wait) and without downloading the file again."""
    from torch_drt.nodecache import _node_files, _path_locks

    cache, release, downloads = NodeCache(tmp_path / "node", 1 << 20), threading.Event(), []
    sleeps: list[str] = []
    real_sleep = time.sleep

    def counted_sleep(seconds: float) -> None:
        sleeps.append(threading.current_thread().name)
        real_sleep(seconds)

    monkeypatch.setattr(_node_files.time, "sleep", counted_sleep)
    holder = _hold_download(cache, release, downloads)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(cache.fetch(
        "sha256-k", len(DATA), lambda fd: downloads.append("waiter"), _check, "s3://b/k")), name="waiter", daemon=True)
    waiter.start()
    lock_path = str(tmp_path / "node" / "locks" / "sha256-k.lock")
    deadline = time.monotonic() + 30
    while "waiter" not in sleeps and getattr(_path_locks._LOCKS.get(lock_path), "users", 0) < 2:
        assert time.monotonic() < deadline, "the waiter did not reach the lock"
        real_sleep(0.01)
    release.set()
    holder.join(30)
    waiter.join(30)
    assert got == [True] and downloads == ["holder"]
    assert "waiter" not in sleeps, "the waiting thread polled the file lock"
    assert cache.path("sha256-k").read_bytes() == DATA
    assert lock_path not in _path_locks._LOCKS  # the in-process locks go with their last user


def test_a_thread_stuck_holding_a_lock_of_its_process_does_not_block_the_others(tmp_path, caplog):
    """The in-process queue keeps ``lock_wait``: past it, the waiter goes on without the lock and downloads."""
    cache, release, downloads = NodeCache(tmp_path / "node", 1 << 20, lock_wait=0.5), threading.Event(), []
    holder = _hold_download(cache, release, downloads)
    try:
        with caplog.at_level(logging.WARNING, logger="torch_drt.cache"):
            assert cache.fetch("sha256-k", len(DATA), lambda fd: os.pwrite(fd, DATA, 0), _check, "s3://b/k")
        assert cache.path("sha256-k").read_bytes() == DATA
        assert f"pid {os.getpid()}" in caplog.text, caplog.text
    finally:
        release.set()
        holder.join(30)
    assert cache.path("sha256-k").read_bytes() == DATA
