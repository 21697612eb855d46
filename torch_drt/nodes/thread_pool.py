"""ThreadPool: daemon worker threads that never keep the interpreter from exiting (OrderedMapper, item fetches).

A task that never returns is abandoned: the pool starts a replacement thread and the stuck one, when it ever
finishes, exits instead of taking more work. Threads hold the task queue only (not the pool or the function
between tasks), so a pool whose owner is garbage-collected is collected too, and its ``__del__`` stops the threads.
Pools still open when the interpreter exits are closed and their idle threads joined by threading's exit hooks
(before ``atexit`` callbacks and finalization): a daemon thread still alive at finalization is torn down with
``pthread_exit``, which aborts the process if the thread sits in C++ code. The join is short when the interpreter
exits on an uncaught ``KeyboardInterrupt`` (Ctrl-C): a user's ``__getitem__`` busy for seconds then does not hold
the exit up (a torch call of a few milliseconds still finishes in time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any

logger = logging.getLogger("torch_drt.loader")

_EXIT_JOIN_S = 2.0  # how long interpreter exit waits, in all, for threads to finish their current task
_INTERRUPT_JOIN_S = 0.2  # the same after Ctrl-C
_open_pools: weakref.WeakSet[ThreadPool] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_registered = False


def _stop_open_pools() -> None:
    """threading's exit hook: close every open pool, then join its threads within ``_EXIT_JOIN_S`` in all
    (``_INTERRUPT_JOIN_S`` after an uncaught ``KeyboardInterrupt``)."""
    pools = list(_open_pools)
    for pool in pools:
        pool.close()
    interrupted = isinstance(getattr(sys, "last_value", None), KeyboardInterrupt)  # set when it was printed
    deadline = time.monotonic() + (_INTERRUPT_JOIN_S if interrupted else _EXIT_JOIN_S)
    for pool in pools:
        for thread in pool._thread_list:
            thread.join(max(0.0, deadline - time.monotonic()))


def _register_exit_hook() -> None:
    global _exit_hook_registered
    with _exit_hook_lock:
        if not _exit_hook_registered:
            with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
                threading._register_atexit(_stop_open_pools)  # type: ignore[attr-defined]
                _exit_hook_registered = True


class _Shared:
    """What the threads share with the pool: the queue, the abandoned tasks (their threads exit after them) and
    which worker index runs which task (a replacement takes its index)."""

    def __init__(self) -> None:
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.abandoned: set[Future] = set()
        self.running: dict[Future, int] = {}


def _start_worker(initializer: Callable[[int], None] | None, index: int) -> BaseException | None:
    """Run ``initializer(index)``; its error, if any, is what every task of this thread then raises."""
    if initializer is None:
        return None
    try:
        initializer(index)
    except BaseException as e:
        return e
    return None


def _run(shared: _Shared, index: int, initializer: Callable[[int], None] | None) -> None:
    failed = _start_worker(initializer, index)
    del initializer
    while True:
        task = shared.tasks.get()
        if task is None:
            return
        future, fn, item = task
        del task
        if future.set_running_or_notify_cancel():
            shared.running[future] = index
            try:
                if failed is not None:
                    raise failed
                future.set_result(fn(item))
            except BaseException as e:  # delivered to the consumer, which re-raises it
                future.set_exception(e)
        del fn, item
        with shared.lock:
            shared.running.pop(future, None)
            if future in shared.abandoned:  # a replacement took this thread's place
                shared.abandoned.discard(future)
                return
        del future


class ThreadPool:
    """``num_workers`` daemon threads running ``fn(item)``, created by the owner's ``reset()``.

    Args:
        fn: the function (held by the pool; a thread holds it only while running a task).
        num_workers: threads.
        name: thread name prefix.
        initializer: called as ``initializer(worker_index)`` in each thread when it starts (a replacement of a
            stuck thread gets its index); if it raises, every task of that thread raises its error.
        lazy: start the threads at the first ``submit()`` instead (an adaptive mapper that maps its items inline
            may need none in an epoch: starting two threads costs milliseconds).
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        num_workers: int,
        name: str = "torch_drt-worker",
        initializer: Callable[[int], None] | None = None,
        lazy: bool = False,
    ) -> None:
        self.pid = os.getpid()
        self.fn = fn
        self.name = name
        self.initializer = initializer
        self._shared = _Shared()
        self._threads = 0
        self._thread_list: list[threading.Thread] = []
        _register_exit_hook()
        _open_pools.add(self)
        self._unstarted = num_workers if lazy else 0
        if not lazy:
            self._start_all(num_workers)

    def _start_all(self, num_workers: int) -> None:
        for index in range(num_workers):
            self._start(index)
        if num_workers:
            logger.debug("started %d %s threads", num_workers, self.name)

    def _start(self, index: int) -> None:
        self._threads += 1
        thread = threading.Thread(
            target=_run,
            args=(self._shared, index, self.initializer),
            name=f"{self.name}_{self._threads}",
            daemon=True,
        )
        thread.start()
        self._thread_list = [t for t in self._thread_list if t.is_alive()] + [thread]

    def submit(self, item: Any, affinity: int | None = None) -> Future:
        """Queue ``fn(item)``; ``affinity`` is ignored (threads share memory)."""
        if self._unstarted:  # (lazy: the first task starts the threads)
            count, self._unstarted = self._unstarted, 0
            self._start_all(count)
        future: Future = Future()
        self._shared.tasks.put((future, self.fn, item))
        return future

    def map(self, items: list[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` on the threads, in order (the first error is raised with its own type)."""
        futures = [self.submit(x) for x in items]
        return [f.result() for f in futures]

    @staticmethod
    def wait(task: Future, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``task``; True when it is done."""
        return bool(wait_futures([task], timeout).done)

    @staticmethod
    def done(task: Future) -> bool:
        """Whether ``task``'s result (or error) is there."""
        return task.done()

    @staticmethod
    def wait_any(tasks: list[Future], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for one of ``tasks``; True when one is done."""
        return bool(wait_futures(tasks, timeout, return_when=FIRST_COMPLETED).done)

    @staticmethod
    def result(task: Future) -> Any:
        """The task's result, or its exception raised with its own type."""
        return task.result()

    @staticmethod
    def drop(task: Future) -> None:
        """The result is no longer wanted (a task already running finishes and is discarded)."""
        task.cancel()

    def abandon(self, task: Future) -> None:
        """Give up on a stuck task: a new thread takes over its place; the stuck one exits if it ever returns."""
        with self._shared.lock:
            if task.cancel() or task.done():
                return
            self._shared.abandoned.add(task)
            index = self._shared.running.get(task, 0)
        logger.warning("a %s thread is stuck on a task: abandoned it and started a replacement", self.name)
        self._start(index)

    def close(self) -> None:
        """Ask every thread to exit once its current task is done (never waits)."""
        if self.pid == os.getpid():  # a forked child must not touch its parent's queue
            for _ in range(self._threads):
                self._shared.tasks.put(None)
            if self._threads:
                logger.debug("stopping %d %s threads", self._threads, self.name)
        self._threads = 0
        _open_pools.discard(self)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to stop
            self.close()
