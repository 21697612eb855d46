"""A process pool that is garbage in a reference cycle: the collector finalizes its workers' pipes (each closes its
descriptor) before or after the pool's own ``__del__`` stops the workers. Their descriptors must not be closed a
second time later (by the reaper, which ends the workers in the background): by then they may be other files'."""

from __future__ import annotations

import contextlib
import gc
import os
import time

from torch_drt._processes import reaper
from torch_drt._processes.pool import ProcessPool


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def test_a_pool_collected_in_a_cycle_never_closes_a_descriptor_twice():
    pool = ProcessPool(abs, 2, "fork", torch_threads=None)
    done = pool.submit(-1)
    assert pool.wait(done, 60) and pool.result(done) == 1
    pool.submit(-2)  # queued (or done unread): the worker holding it is killed
    pool.cycle = pool  # only the collector frees it
    pids = pool.pids()
    del pool, done
    gc.collect()
    pipes = [os.pipe() for _ in range(32)]  # the descriptors freed by the collection, taken again
    try:
        deadline = time.monotonic() + reaper.EXIT_GRACE_S + 60
        while not all(map(_gone, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(map(_gone, pids))
        time.sleep(0.2)  # the reaper's last closes, once it joined them
        for fds in pipes:
            for fd in fds:
                os.fstat(fd)  # still open: none closed by a stale descriptor number
    finally:
        for fds in pipes:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
