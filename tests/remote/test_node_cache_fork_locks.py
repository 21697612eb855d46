"""A node-cache lock a thread of the parent holds when a loading process forks (a download in flight in the main
process) goes when the parent releases it: the child does not keep it through its copy of the descriptor. So
too for a lock the parent's thread is dropping at the fork, and for a file it is demoting (an exclusive lock on the
file itself)."""

from __future__ import annotations

import os
import signal
import threading
import time

from torch_drt.nodecache import _node_files, node_cache
from torch_drt.nodecache._node_files import locked


def test_a_lock_held_by_a_parent_thread_at_the_fork_is_released_for_the_child(tmp_path):
    path = tmp_path / "shard.lock"
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locked(path):
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait for the lock the parent's thread holds, at most 20 s
        os.close(r)
        try:
            with locked(path, wait=20) as held:
                os.write(w, b"1" if held else b"0")
        finally:
            os._exit(0)
    os.close(w)
    release.set()  # the parent's thread releases its lock after the fork
    holder.join(30)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"1"  # the child took the lock (before: it waited 20 s for its own inherited copy, then gave up)


def _child_exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_lock_a_parent_thread_drops_as_the_process_forks_is_not_kept_by_the_child(tmp_path, monkeypatch):
    path = tmp_path / ".space.lock"  # (the space lock, which every download of the child takes)
    closing, forked = threading.Event(), threading.Event()

    class Held(set):
        """The lock files' descriptors; the holder's pauses as it forgets its descriptor, until the fork."""

        def discard(self, fd: int) -> None:
            super().discard(fd)
            if threading.current_thread() is holder:
                closing.set()
                forked.wait(2)  # (a fork cannot come in between since the fix: it waits for this, then goes on)

    def hold() -> None:
        with locked(path):
            pass

    monkeypatch.setattr(_node_files, "_HELD", Held())
    holder = threading.Thread(target=hold)
    holder.start()
    assert closing.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: take the lock once the parent's thread closed its descriptor (at most 10 s)
        code = 3
        try:
            with locked(path, wait=10) as held:
                code = 0 if held else 1
        finally:
            os._exit(code)
    forked.set()
    holder.join(30)
    assert _child_exit_code(pid) == 0  # before: the child's copy of the descriptor kept the lock; it waited 10 s


def test_a_file_a_parent_thread_demotes_as_the_process_forks_stays_readable_in_the_child(tmp_path, monkeypatch):
    node = node_cache.NodeCache(tmp_path / "node", 1 << 20)
    key = "sha256-" + "0" * 64
    assert node.fetch(key, 4, lambda fd: os.write(fd, b"data"), lambda path: None, "shard")
    demoting, forked = threading.Event(), threading.Event()

    class Clock:
        """``time`` for node_cache: the demoter pauses, holding its lock on the file, until the fork."""

        def __getattr__(self, name: str):
            return getattr(time, name)

        def time(self) -> float:
            if threading.current_thread() is demoter:
                demoting.set()
                forked.wait(30)
            return time.time()

    monkeypatch.setattr(node_cache, "time", Clock())
    demoter = threading.Thread(target=node.demote, args=(key,))
    demoter.start()
    assert demoting.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: read the file (a shared lock on it) within 10 s
        code = 3
        try:
            signal.signal(signal.SIGALRM, lambda *_: os._exit(1))
            signal.alarm(10)
            pinned = node.pin(key, 4, mapped=False)
            code = 0 if pinned is not None else 2
        finally:
            os._exit(code)
    forked.set()
    demoter.join(30)
    assert _child_exit_code(pid) == 0  # before: the child's copy of the descriptor kept the exclusive lock
