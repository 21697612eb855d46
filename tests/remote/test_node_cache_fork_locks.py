"""A node-cache lock a thread of the parent holds when a loading process forks (a download in flight in the main
process) goes when the parent releases it: the child does not keep it through its copy of the descriptor."""

from __future__ import annotations

import os
import threading

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
