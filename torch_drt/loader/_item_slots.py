"""ItemSlots: the items of an async dataset in flight on the loader's event loop, the oldest batch served first."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class _Batch:
    """One batch's items: running (holding a slot) and waiting (their futures, in the order they asked)."""

    __slots__ = ("cap", "running", "waiting")

    def __init__(self, cap: int) -> None:
        self.cap, self.running = cap, 0
        self.waiting: deque[asyncio.Future[None]] = deque()


class ItemSlots:
    """At most ``total`` items in flight on one event loop over every batch fetched there, and at most ``cap`` of
    each batch. A freed slot goes to the oldest batch (lowest ``order``) with an item waiting under its cap, so the
    batch delivered next is never starved by the ones started after it, and a batch waiting on its slowest items
    leaves its other slots to the next batches.

    Made and used on the loop's thread only (no locks).

    Args:
        total: items in flight at most (``num_workers x item_concurrency`` with thread workers).
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.loop = asyncio.get_running_loop()
        self._free = total
        self._batches: dict[int, _Batch] = {}  # by order; a batch's entry goes when nothing of it runs or waits

    async def acquire(self, order: int, cap: int) -> None:
        """Wait for a slot for an item of the batch numbered ``order`` (lower: older), ``cap`` items of it at most.
        A batch's items get their slots in the order they ask."""
        batch = self._batches.get(order)
        if batch is None:
            batch = self._batches[order] = _Batch(cap)
        if self._free and batch.running < cap:  # (then none of its items waits: they would have had this slot)
            self._free -= 1
            batch.running += 1
            return
        granted = self.loop.create_future()
        batch.waiting.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # granted, then cancelled before it ran: pass it on
                self.release(order)
            else:
                with contextlib.suppress(ValueError):  # (a release may have taken it out already)
                    batch.waiting.remove(granted)
                self._tidy(order, batch)
            raise

    def release(self, order: int) -> None:
        """Give back the slot of an item of batch ``order``: to the oldest batch's waiting item under its cap."""
        batch = self._batches[order]
        batch.running -= 1
        self._free += 1
        for key in sorted(self._batches) if len(self._batches) > 1 else (order,):
            waiting = self._batches[key]
            while self._free and waiting.waiting and waiting.running < waiting.cap:
                granted = waiting.waiting.popleft()
                if not granted.done():  # (a cancelled item's future is done: it takes itself out)
                    granted.set_result(None)
                    waiting.running += 1
                    self._free -= 1
            if not self._free:
                break
        self._tidy(order, batch)

    def _tidy(self, order: int, batch: _Batch) -> None:
        if not batch.running and not batch.waiting and self._batches.get(order) is batch:
            del self._batches[order]
