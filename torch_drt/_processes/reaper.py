"""The reaper: one daemon thread per process that ends the worker processes their pools have stopped.

``ProcessPool.close`` tells its workers to stop (idle ones are sent the stop, busy ones killed) and hands them here
instead of joining them itself, so a loader's epoch end does not wait for its workers to exit (about 20 ms forked,
60 ms through a fork server). The reaper joins each as it exits (its sentinel is ready), kills one still there
after ``EXIT_GRACE_S`` and joins it, then closes its pipes and removes its ring files (``WorkerHandle.retire``): no
worker is leaked. The thread starts with the first worker handed over; it is process-wide, as the workers' exits
are the process's business, not a pool's (a pool may be gone long before its workers are).

At interpreter exit, threading's exit hooks (before ``atexit`` callbacks and finalization) stop the thread and end
the workers still there, waiting ``_EXIT_WAIT_S`` at most for them before killing the rest; workers handed over
after that are ended on the spot. A forked child starts with no reaper and nothing to reap (its parent's workers
are not its children).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from multiprocessing.connection import wait
from time import monotonic
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_drt._processes.handle import WorkerHandle

logger = logging.getLogger("torch_drt.loader")

EXIT_GRACE_S = 5.0  # a stopped worker still there after this long is killed
_EXIT_WAIT_S = 1.0  # at interpreter exit: how long the stopped workers still there are waited for, in all


class _Reaper:
    """The workers being ended (each with its kill deadline) and the thread that ends them."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entered by a pool collected (its ``__del__``) while it is held
        self._pending: list[tuple[float, WorkerHandle]] = []
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None  # a pipe: a byte written wakes the thread
        self._stopped = False  # interpreter exit: workers are ended on the spot
        self._hooked = False  # the exit hook is registered (a forked child inherits it, with threading's list)

    def hand_over(self, worker: WorkerHandle) -> None:
        """End ``worker`` (told to stop, or killed) in the background: joined once it exits, killed past the grace."""
        with self._lock:
            if not self._stopped and self._start():
                self._pending.append((monotonic() + EXIT_GRACE_S, worker))
                assert self._wake is not None  # (the running thread's pipe)
                os.write(self._wake[1], b"\0")
                return
        _end(worker, _EXIT_WAIT_S)  # the interpreter is exiting: no thread to hand it to

    def _start(self) -> bool:
        """Start the thread unless it runs (under the lock); False when the interpreter is exiting."""
        if self._thread is not None:
            return True
        if not self._hooked:
            try:
                threading._register_atexit(self.stop)  # type: ignore[attr-defined]
            except RuntimeError:  # the interpreter is already shutting down
                return False
            self._hooked = True
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._run, name="torch_drt-reaper", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            with self._lock:
                if self._stopped:
                    return
                pending = list(self._pending)
            soonest = min((deadline for deadline, _ in pending), default=None)
            timeout = None if soonest is None else max(0.0, soonest - monotonic())
            ready = set(wait([wake[0], *(w.process.sentinel for _, w in pending)], timeout))
            if wake[0] in ready:
                os.read(wake[0], 4096)
            now = monotonic()
            for entry in pending:
                deadline, worker = entry
                if worker.process.sentinel in ready or now >= deadline:  # exiting (its descriptors closed: it
                    # is a zombie at once) is joined, within what is left of its grace; past its grace it is killed
                    _end(worker, max(0.0, deadline - now))
                    with self._lock:
                        self._pending.remove(entry)

    def stop(self) -> None:
        """threading's exit hook: stop the thread, then end the workers still there (killed after ``_EXIT_WAIT_S``)."""
        with self._lock:
            self._stopped = True
            thread, wake = self._thread, self._wake
            if wake is not None:
                os.write(wake[1], b"\0")
        if thread is not None:
            thread.join()
        with self._lock:
            pending, self._pending = self._pending, []
        deadline = monotonic() + _EXIT_WAIT_S
        for _, worker in pending:
            _end(worker, max(0.0, deadline - monotonic()))

    def after_fork_in_child(self) -> None:
        """A forked child: no thread, nothing to reap (its parent's workers are not its children)."""
        self._lock = threading.RLock()
        self._pending, self._thread, self._stopped = [], None, False
        if self._wake is not None:
            for fd in self._wake:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._wake = None


def _end(worker: WorkerHandle, grace: float) -> None:
    """``worker.retire(grace)``; an error is logged, never raised (the reaper goes on with the others)."""
    try:
        worker.retire(grace)
    except Exception:
        logger.exception("ending worker process %s failed", worker.process.pid)


_REAPER = _Reaper()
os.register_at_fork(after_in_child=_REAPER.after_fork_in_child)


def hand_over(worker: WorkerHandle) -> None:
    """End a worker that was told to stop (or killed) in the background; see the module's docstring."""
    _REAPER.hand_over(worker)
