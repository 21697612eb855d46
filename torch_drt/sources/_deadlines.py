"""Deadlines: a time limit for each of many attempts on one event loop, kept by one timer."""

from __future__ import annotations

import asyncio
import time


class Deadlines:
    """The attempts running on one event loop, each given ``timeout`` seconds, overdue ones cancelled by one timer.

    An attempt calls ``start()`` before its first ``await`` and ``stop(task)`` in a ``finally``; when it catches
    ``asyncio.CancelledError`` it asks ``expired(task)``: True when the cancellation was this timer's (and only
    its), which is then taken back (``Task.uncancel``, as ``asyncio.timeout`` does), so the attempt can fail with
    a time-out instead. Any other cancellation goes on.

    All attempts share ``timeout``, so their deadlines come in the order they start: the timer only ever looks at
    the oldest running attempt. Per attempt this costs a clock read and a dict entry, where a timer per attempt
    (``asyncio.timeout``, aiohttp's ``ClientTimeout(total=...)``) costs a heap entry and a dozen Python calls, about
    5% of a 64 KiB request's client CPU. Made and used on the loop's thread only.

    Args:
        timeout: seconds per attempt (> 0).
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._running: dict[asyncio.Task, float] = {}  # task: its deadline (time.monotonic), oldest first
        self._expired: set[asyncio.Task] = set()  # cancelled by the timer, not yet seen by their attempt
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> asyncio.Task:
        """Give the current task's attempt ``timeout`` seconds from now; returns the task (for ``stop``).

        Raises:
            RuntimeError: not called from a task, or the task already runs an attempt here.
        """
        task = asyncio.current_task()
        if task is None or task in self._running:
            raise RuntimeError("an attempt runs in its own task, one at a time")
        self._running[task] = time.monotonic() + self.timeout
        if self._timer is None:
            self._arm()
        return task

    def stop(self, task: asyncio.Task) -> None:
        """The attempt of ``task`` is over (call it in a ``finally``)."""
        if self._running.pop(task, None) is None and task in self._expired:
            self._expired.discard(task)  # cancelled, yet the attempt ended otherwise: the cancellation taken back
            task.uncancel()

    def expired(self, task: asyncio.Task) -> bool:
        """Whether the ``CancelledError`` that ``task`` got came from this timer alone (it is then taken back)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() == 0  # another cancellation as well: that one goes on

    def close(self) -> None:
        """Stop the timer (the loop is closing); the running attempts keep no limit."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        """Wake up at the oldest running attempt's deadline."""
        deadline = next(iter(self._running.values()))
        self._timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), self._check)

    def _check(self) -> None:
        """Cancel the attempts past their deadline (the oldest first), then wait for the next deadline."""
        self._timer = None
        now = time.monotonic()
        while self._running:
            task, deadline = next(iter(self._running.items()))
            if deadline > now:
                self._arm()
                return
            del self._running[task]
            self._expired.add(task)
            task.cancel()
