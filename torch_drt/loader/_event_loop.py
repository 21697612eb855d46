"""One asyncio event loop on a daemon thread, for datasets whose items are fetched with ``async def``."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["EventLoopThread", "is_async_dataset"]

logger = logging.getLogger("torch_drt.loader")


def is_async_dataset(dataset: Any) -> bool:
    """True when ``__getitem__``, ``__getitems__`` or ``aget(index)`` of the dataset is ``async def``."""
    cls = type(dataset)
    return any(
        inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("__getitem__", "__getitems__", "aget")
    )


class EventLoopThread:
    """One asyncio event loop on a daemon thread, kept across epochs; ``start()`` creates the thread.

    In a forked child the parent's loop thread does not exist: ``start()`` makes a new one there.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self) -> None:
        """Start the loop thread if it is not running (called from a loader's ``iter()``)."""
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        self._pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="torch_drt-event-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if self.loop is None or self._pid != os.getpid():
            self.start()
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self, aclose: Callable[[], Any] | None = None, timeout: float = 5.0) -> None:
        """Await ``aclose()`` once on the loop (errors and time-outs are logged), then stop the loop."""
        if self.loop is None or self._thread is None or self._pid != os.getpid():
            return
        if aclose is not None and self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(aclose(), self.loop).result(timeout)
            except Exception:
                logger.exception("aclose() failed or timed out; stopping the event loop anyway")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
        self.loop, self._thread = None, None
