"""Worker processes: per-worker pipes, death detection, restarts or a stop, deadlines, abandon on time-out.

Each worker has its own task pipe and result pipe, so the pool knows which tasks a worker holds (in order) and
a dead worker never leaves a shared lock taken. The consumer polls the result pipes and the workers' sentinels
while it waits: a worker that dies is replaced and its tasks go to the replacement, except a task that was running
in two dead workers, which fails once (``BrokenProcessPool``); a task abandoned after a time-out has its worker
killed and replaced the same way. With ``Supervision(restart=False)`` (the cache's writer processes) a worker that
dies stops the pool instead, as one past a start or task deadline does (``supervision.py``).
Workers ignore SIGINT (Ctrl-C is the consumer's), are daemons, so they never keep the interpreter alive, and run
torch with one thread (as torch's loader workers do: ``worker_init`` may raise it) unless told otherwise.
Large tensors of results travel through the worker's shared-memory ring (``SharedMemoryTransport``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import multiprocessing
import os
import pickle
import weakref
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait as wait_ready
from time import monotonic
from typing import TYPE_CHECKING, Any

from torch_drt._processes.handle import WorkerHandle
from torch_drt._processes.reaper import hand_over
from torch_drt._processes.supervision import Supervision, WorkerExited

if TYPE_CHECKING:
    from torch_drt._processes.transport import SharedMemoryTransport


def _release_slot(pool: weakref.ref, worker: WorkerHandle, task: Task) -> None:
    """A batch's tensors are gone: its slot may be written again (nothing to do once the pool is gone)."""
    owner = pool()
    if owner is not None:
        owner._free(worker, task)


logger = logging.getLogger("torch_drt.loader")

_STARTUP_FAILURES = 3  # workers in a row that die before their first answer: the pool cannot work
_CLOSE_GRACE_S = 1.0  # ``close(wait=True)``: how long each stopped worker has to exit before it is killed


class Task:
    """One submitted item: where it went and, once received, its outcome."""

    __slots__ = ("done", "dropped", "id", "item", "ok", "packed", "slot", "strikes", "value", "worker")

    def __init__(self, task_id: int, item: Any) -> None:
        self.id, self.item = task_id, item
        self.strikes = 0
        self.done = self.dropped = self.ok = self.packed = False
        self.slot: int | None = None
        self.value: Any = None
        self.worker: WorkerHandle | None = None


class ProcessPool:
    """``num_workers`` daemon processes running ``fn(item)``; created by the owner's ``reset()``.

    Args:
        fn: the function (pickled once and installed in each worker; inherited as it is with fork).
        num_workers: processes.
        context: multiprocessing start method (spawn, fork, forkserver; None: the default).
        transport: the shared-memory transport for large tensors of results (None: torch's own hand-off).
        initializer: called as ``initializer(worker_index)`` in each worker process when it starts.
        supervision: restart a worker that dies, or stop; the start and task deadlines (None: restart, none).
        torch_threads: torch's intra-op threads in each worker (None: torch's default).
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        num_workers: int,
        context: str | None = None,
        transport: SharedMemoryTransport | None = None,
        initializer: Callable[[int], None] | None = None,
        supervision: Supervision | None = None,
        torch_threads: int | None = 1,
    ) -> None:
        self.pid = os.getpid()
        self._supervision, self._threads = supervision or Supervision(), torch_threads
        self._ctx = multiprocessing.get_context(context)
        # forked workers inherit the function as it is (as torch's do: no pickling, lambdas work); others unpickle it
        fork = self._ctx.get_start_method() == "fork"
        self._payload: Any = (fn, initializer) if fork else pickle.dumps((fn, initializer))
        self._transport = transport if transport is not None and transport.available else None
        self._reader = None
        if transport is not None:  # only then: the transport's module imports torch
            from torch_drt._processes.transport import RingReader

            self._reader = RingReader(pin=transport.pin)
        self._ids = itertools.count()
        self._turn = itertools.count()
        self._startup_failures = 0
        self._workers = [self._spawn(i) for i in range(num_workers)]

    def _spawn(self, index: int) -> WorkerHandle:
        return WorkerHandle(self._ctx, index, self._payload, self._threads, self._transport, self.pid)

    def _send(self, w: WorkerHandle, task: Task) -> None:
        task.worker = w
        task.slot = w.free_slots.pop() if w.free_slots else None
        if w.started and not w.queued:  # it starts this task now
            w.since = monotonic()
        w.queued.append(task)
        w.tasks.send((task.id, task.item, task.slot))

    def submit(self, item: Any, affinity: int | None = None) -> Task:
        """Queue ``fn(item)`` on worker ``affinity % num_workers``, or on the least busy worker."""
        task = Task(next(self._ids), item)
        if affinity is not None:
            w = self._workers[affinity % len(self._workers)]
        else:
            turn = next(self._turn)
            n = len(self._workers)
            w = min((self._workers[(turn + k) % n] for k in range(n)), key=lambda w: len(w.queued))
        self._send(w, task)
        return task

    def _receive(self, w: WorkerHandle) -> None:
        while w.results.poll():
            try:
                reply = w.results.recv()
            except (EOFError, OSError):
                return
            except Exception as e:  # the result does not unpickle here
                reply = (0, False, RuntimeError(f"cannot receive a worker's result: {e}"), False)
            w.since = monotonic()  # it reported its start or a result: its next task starts now
            if reply[0] is None:  # its start
                w.started = True
                continue
            task = w.queued.popleft()
            _, task.ok, task.value, task.packed = reply
            w.answered = True
            self._settle(w, task)

    def _settle(self, w: WorkerHandle, task: Task) -> None:
        task.done = True
        task.item = None
        if task.dropped:
            self._free(w, task)

    def _free(self, w: WorkerHandle, task: Task) -> None:
        if task.slot is not None:
            w.free_slots.append(task.slot)
            task.slot = None
        task.value = None

    def _replace(self, index: int, culprit: Task | None, error: BaseException) -> None:
        """Retire worker ``index``: fail ``culprit``, resend its other tasks to a new worker.

        Without a named culprit (the worker died), its oldest task is suspected: a task suspected twice fails.
        (Once is not enough: a worker's last results may have been lost with it, and a worker killed from
        outside is not its task's fault.)
        """
        w = self._workers[index]
        self._receive(w)
        logger.warning("replacing loader worker process %d (pid %d): %s", index, w.process.pid, error)
        w.retire(grace=0)
        new = self._workers[index] = self._spawn(index)
        if culprit is None:
            suspect = next((task for task in w.queued if not task.dropped), None)
            if suspect is not None:
                suspect.strikes += 1
                culprit = suspect if suspect.strikes >= 2 else None
        for task in w.queued:
            if task is culprit or task.dropped:
                task.slot = None
                task.ok, task.value = False, error
                self._settle(w, task)
            else:
                self._send(new, task)

    def _poll(self, timeout: float) -> None:
        """Receive what arrives within ``timeout`` seconds (less when a deadline comes first); replace the dead
        workers, or raise ``WorkerExited`` (not restarting) or ``WorkerTimeout``."""
        soonest = min(map(self._supervision.deadline, self._workers), default=math.inf)
        timeout = max(0.0, min(timeout, soonest - monotonic()))
        by_conn = {w.results: w for w in self._workers}
        for ready in wait_ready([*by_conn, *(w.process.sentinel for w in self._workers)], timeout):
            if ready in by_conn:
                self._receive(by_conn[ready])
        for index in range(len(self._workers)):
            w = self._workers[index]
            if not w.process.is_alive():
                code = w.process.exitcode
                if not self._supervision.restart:
                    raise WorkerExited(code)
                self._startup_failures = 0 if w.answered else self._startup_failures + 1
                if self._startup_failures >= _STARTUP_FAILURES:
                    raise RuntimeError(
                        f"loading worker processes exit as they start (exit code {code}); their stderr says why. "
                        "With spawn or forkserver the main script must guard its entry point with "
                        "`if __name__ == '__main__':` and the dataset must import in a fresh interpreter"
                    )
                self._replace(
                    index,
                    None,
                    BrokenProcessPool(
                        f"a worker process terminated abruptly (exit code {code}) while loading this batch; "
                        "the worker was replaced and loading goes on"
                    ),
                )
        self._supervision.check(self._workers)

    def _poll_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Receive results for up to ``timeout`` seconds, until ``done()``; True when it is (the one wait loop)."""
        deadline = monotonic() + timeout
        while not done():
            remaining = deadline - monotonic()
            if remaining <= 0:
                return False
            self._poll(remaining)
        return True

    def wait(self, task: Task, timeout: float) -> bool:
        """Receive results for up to ``timeout`` seconds, until ``task`` is done; True when it is."""
        w = task.worker
        if not task.done and w is not None and w.results.poll():  # the usual case: its result is there already
            self._receive(w)
        return task.done or self._poll_until(lambda: task.done, timeout)

    @staticmethod
    def done(task: Task) -> bool:
        """Whether ``task``'s result was received."""
        return task.done

    def wait_any(self, tasks: list[Task], timeout: float) -> bool:
        """Receive results for up to ``timeout`` seconds, until one of ``tasks`` is done; True when one is."""
        return self._poll_until(lambda: any(task.done for task in tasks), timeout)

    def result(self, task: Task) -> Any:
        """The task's result (its large tensors copied out of the ring), or its error with its own type."""
        value, ok, packed, worker = task.value, task.ok, task.packed, task.worker
        assert worker is not None  # (submit sent it to one)
        task.value = None
        if not ok or self._reader is None:
            self._free(worker, task)
            if not ok:
                raise value
            return value
        return self._reader.unpack(value, packed, functools.partial(_release_slot, weakref.ref(self), worker, task))

    def pids(self) -> list[int]:
        """The worker processes' pids."""
        return [w.process.pid for w in self._workers]

    def drop(self, task: Task) -> None:
        """The result is no longer wanted: it is discarded (and its slot freed) when it arrives."""
        task.dropped = True

    def abandon(self, task: Task) -> None:
        """Give up on a stuck task: its worker is killed and replaced; its other tasks go to the replacement."""
        if not task.done and task.worker in self._workers:
            self._replace(self._workers.index(task.worker), task, TimeoutError("abandoned after a time-out"))

    def close(self, wait: bool = False) -> None:
        """Stop the workers: idle ones are told to exit, busy ones are killed. The reaper ends them in the background
        (joined as they exit, killed after ``reaper.EXIT_GRACE_S``; their pipes closed and ring files removed), so
        this returns at once; ``wait``: end them here instead (each given ``_CLOSE_GRACE_S`` to exit, then killed),
        for an owner that needs them gone on return (a killed writer's staging lock released)."""
        if self.pid != os.getpid():  # a forked child must not stop its parent's workers
            self._workers = []
            return
        for w in self._workers:
            w.stop()
        for w in self._workers:
            if wait:
                w.retire(grace=_CLOSE_GRACE_S)
            else:
                hand_over(w)
        if self._workers:
            logger.debug("stopped %d loader worker processes", len(self._workers))
        self._workers = []
        if self._reader is not None:
            self._reader.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown multiprocessing stops daemon workers itself
            self.close()
