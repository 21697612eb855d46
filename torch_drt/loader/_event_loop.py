"""One asyncio event loop on a daemon thread, for datasets whose items are fetched with ``async def``."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("torch_drt.loader")

_RUNNING: weakref.WeakSet[EventLoopThread] = weakref.WeakSet()  # loops to close when the interpreter exits


@atexit.register
def _close_running_loops() -> None:
    """At exit, await each running loop's ``aclose`` (a dataset's client sessions), so that a loader still alive then
    leaves no unclosed session or connector behind (aiohttp's ResourceWarnings)."""
    for thread in list(_RUNNING):
        thread.stop(thread.aclose)


def is_async_dataset(dataset: Any) -> bool:
    """True when ``__getitem__``, ``__getitems__`` or ``aget(index)`` of the dataset is ``async def``."""
    cls = type(dataset)
    return any(
        inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("__getitem__", "__getitems__", "aget")
    )


async def _wound_down(aclose: Callable[[], Any] | None) -> None:
    """Cancel the running loop's other tasks and wait for them to end (as ``asyncio.run`` does before it closes its
    loop), then await ``aclose()``: a batch's fetch that a worker took is still running when its loader goes, and
    one of its items starting during ``aclose()`` would open a new client session, left unclosed."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if aclose is not None:
        await aclose()


class EventLoopThread:
    """One asyncio event loop on a daemon thread, kept across epochs; ``start()`` creates the thread.

    In a forked child the parent's loop thread does not exist: ``start()`` makes a new one there.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.aclose: Callable[[], Any] | None = None  # awaited when the interpreter exits with the loop running
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self, aclose: Callable[[], Any] | None = None) -> None:
        """Start the loop thread if it is not running (called from a loader's ``iter()``); ``aclose`` (the dataset's)
        is awaited on the loop by ``stop()`` at the latest when the interpreter exits."""
        if aclose is not None:
            self.aclose = aclose
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        self._pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="torch_drt-event-loop", daemon=True)
        self._thread.start()
        _RUNNING.add(self)

    def submit(self, coro: Any) -> concurrent.futures.Future:
        """Start ``coro`` on the loop (from any other thread); its result comes in the returned future."""
        if self.loop is None or self._pid != os.getpid():
            self.start()
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        return self.submit(coro).result()

    def stop(self, aclose: Callable[[], Any] | None = None, timeout: float = 5.0) -> None:
        """End the loop's tasks, then await ``aclose()`` once on the loop (errors and time-outs are logged), then
        stop the loop (``_wound_down``: no fetch still running can open a session after ``aclose()`` closed it)."""
        if self.loop is None or self._thread is None or self._pid != os.getpid():
            return
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_wound_down(aclose), self.loop).result(timeout)
            except Exception:
                logger.exception("ending the loop's tasks or aclose() failed or timed out; stopping the loop anyway")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
        self.loop, self._thread = None, None
        _RUNNING.discard(self)
