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


class _Paused(threading.Thread):
    """The first one made stops as it starts, between taking its ident and reporting itself started (where a thread
    switch may come), until ``go`` is set."""

    made: list[_Paused] = []
    starting = threading.Event()
    go = threading.Event()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.made.append(self)

    def _set_tstate_lock(self) -> None:
        if self is self.made[0]:
            self.starting.set()
            self.go.wait(30)
        super()._set_tstate_lock()


def test_a_thread_still_starting_counts_for_a_call_from_another_thread(tmp_path, monkeypatch):
    """A thread that has its ident but has not reported itself started is not alive yet: it still counts (another
    call starts no thread in its place), and it leaves the count once, without an error, as its queue runs dry."""
    _Paused.made.clear()
    _Paused.starting.clear()
    _Paused.go.clear()
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    threads = types.SimpleNamespace(Thread=_Paused, current_thread=threading.current_thread)
    monkeypatch.setattr(_warm_start, "threading", threads)
    files = [LocalFile(tmp_path, f"k{i}") for i in range(3)]
    first = threading.Thread(target=_warm_start.fetch_now, args=(files[:1], 2), daemon=True)
    first.start()
    try:
        assert _Paused.starting.wait(30)
        _warm_start.fetch_now(files[1:], 2)  # the queue holds 3 files: one more thread makes 2
    finally:
        _Paused.go.set()
    first.join(30)
    for file in files:
        assert file.done.wait(30), file.key
    for thread in _Paused.made:
        thread.join(30)
    assert not errors, errors
    assert len(_Paused.made) == 2
    assert not _warm_start.running()
