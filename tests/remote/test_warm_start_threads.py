"""The first batches' downloads (``torch_drt.nodecache._warm_start``) start their threads after the queue's lock is
released: ``Thread.start`` waits for the new thread, where a garbage collection may run first, and a finalizer run
there that takes the lock must not wait for the thread that is waiting for it (the pattern of three fork hangs)."""

from __future__ import annotations

import gc
import threading
import types
from pathlib import Path

import pytest

from torch_drt.nodecache import _warm_start

pytestmark = pytest.mark.timeout(120)


class LocalFile:
    """A file ``fetch`` writes under ``root``; ``done`` is set once it did."""

    def __init__(self, root: Path, key: str) -> None:
        self.key, self.size, self.path = key, 1, root / key
        self.done = threading.Event()

    def fetch(self, optional: bool = False, requested=None) -> bool:
        if requested is not None:
            requested()
        self.path.write_bytes(b"x")
        self.done.set()
        return True


class _Asking:
    """Garbage whose finalizer takes the warm start's lock (it asks whether downloads are running)."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        _warm_start.running()


class _Collecting(threading.Thread):
    def _bootstrap_inner(self) -> None:  # (a collection runs first on the new thread, before it reports started)
        gc.collect()
        super()._bootstrap_inner()


def test_a_collection_as_a_download_thread_starts_may_take_the_lock(tmp_path, monkeypatch):
    files = [LocalFile(tmp_path, f"k{i}") for i in range(2)]
    threads = types.SimpleNamespace(Thread=_Collecting, current_thread=threading.current_thread)
    monkeypatch.setattr(_warm_start, "threading", threads)
    gc.disable()  # (the garbage is collected on the download thread, not before)
    try:
        _Asking()
        asking = threading.Thread(target=_warm_start.fetch_now, args=(files, 2), daemon=True)
        asking.start()
        asking.join(30)
    finally:
        gc.enable()
    assert not asking.is_alive(), "fetch_now waited for a download thread that waited for its lock"
    for file in files:
        assert file.done.wait(30)
        assert file.path.read_bytes() == b"x"


class _Refused(threading.Thread):
    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def test_threads_that_could_not_start_do_not_count(tmp_path, monkeypatch):
    """The threads that failed to start are not counted as downloading: the next call starts threads for the files
    queued then too."""
    files = [LocalFile(tmp_path, f"k{i}") for i in range(3)]
    monkeypatch.setattr(_warm_start, "threading", types.SimpleNamespace(Thread=_Refused))
    with pytest.raises(RuntimeError, match="can't start"):
        _warm_start.fetch_now(files[:2], 2)
    monkeypatch.setattr(_warm_start, "threading", threading)
    _warm_start.fetch_now(files[2:], 2)
    for file in files:
        assert file.done.wait(30), file.key
