"""LoopFetch: the batches of an async dataset, fetched on the loader's event loop, started as they are submitted."""

from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import Future
from typing import Any

from torch_drt.loader._event_loop import EventLoopThread
from torch_drt.loader._item_slots import ItemSlots
from torch_drt.nodes.batch_plan import BatchPlan
from torch_drt.random import enter_batch, exit_batch


def batch_call(dataset: Any, item_concurrency: int) -> bool:
    """Whether an async dataset's batch is one ``await __getitems__(indices)`` (else one item at a time): it has an
    ``async def __getitems__`` and ``item_concurrency == 1`` or no ``async def`` item getter."""
    get = getattr(dataset, "aget", None) or dataset.__getitem__
    getitems = getattr(dataset, "__getitems__", None)
    return inspect.iscoroutinefunction(getitems) and (item_concurrency == 1 or not inspect.iscoroutinefunction(get))


class LoopFetch:
    """An async dataset's batches on one event loop (``EventLoopThread``): ``items(plan)`` from a worker or the
    calling thread.

    Item by item (``by_item``), ``begin(plan)`` starts a batch's fetch on the loop as the loader submits it to a
    worker thread, and the worker's ``items(plan)`` waits for it. The batches in flight then share ``item_threads``
    slots on the loop, the oldest batch first (``ItemSlots``): a batch waiting on its slowest items leaves its
    other slots to the next ones, so the requests in flight stay at ``item_threads`` across batch boundaries, each
    batch still at most ``item_concurrency`` at a time. It pickles without its loop and fetches (a worker process
    makes its own loop).

    Args:
        dataset: a dataset with an ``async def`` ``__getitem__``, ``__getitems__`` or ``aget(index)``.
        item_concurrency: items of one batch in flight at once.
    """

    def __init__(self, dataset: Any, item_concurrency: int) -> None:
        self.dataset, self.item_concurrency = dataset, item_concurrency
        self.event_loop = EventLoopThread()
        self.by_item = not batch_call(dataset, item_concurrency)
        self._started: dict[int, tuple[BatchPlan, Future]] = {}  # id(plan): (plan, its fetch begun on the loop)
        self._order = 0  # batches fetched on the loop so far: their order for the item slots
        self._slots: ItemSlots | None = None  # made on the loop

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"event_loop": EventLoopThread(), "_started": {}, "_slots": None}

    def begin(self, plan: BatchPlan, seed: int, item_threads: int) -> None:
        """Start fetching ``plan``'s items on the loop (``by_item`` only; the caller hands the plan to a worker
        thread next)."""
        self._order += 1
        self._started[id(plan)] = (plan, self.event_loop.submit(self._gather(plan, seed, item_threads, self._order)))

    def dropped(self) -> None:
        """Cancel the fetches ``begin`` started whose batches no worker took (the loader dropped them)."""
        started, self._started = self._started, {}
        for _, future in list(started.values()):
            future.cancel()

    def items(self, plan: BatchPlan, seed: int, item_threads: int) -> list[Any]:
        """The plan's items: the fetch ``begin`` started, else one run on the loop now."""
        started = self._started.pop(id(plan), None)
        if started is not None and started[0] is plan:
            return started[1].result()
        self._order += 1
        return self.event_loop.run(self._gather(plan, seed, item_threads, self._order))

    def _item_slots(self, item_threads: int) -> ItemSlots:
        """The running loop's ``ItemSlots``, made anew for another loop or number of item threads."""
        slots = self._slots
        if slots is None or slots.total != item_threads or slots.loop is not asyncio.get_running_loop():
            slots = self._slots = ItemSlots(item_threads)
        return slots

    async def _gather(self, plan: BatchPlan, seed: int, item_threads: int, order: int) -> list[Any]:
        token = enter_batch(seed, plan.epoch, plan.indices, plan.positions)  # tasks below copy this context
        try:
            indices = plan.indices
            if not self.by_item:
                items = list(await self.dataset.__getitems__(list(indices)))
                if len(items) != len(indices):
                    raise ValueError(f"__getitems__ returned {len(items)} items for {len(indices)} indices")
                return items
            get = getattr(self.dataset, "aget", None) or self.dataset.__getitem__
            slots, cap = self._item_slots(item_threads), self.item_concurrency

            async def one(index: int) -> Any:
                await slots.acquire(order, cap)
                try:
                    return await get(index)
                finally:
                    slots.release(order)

            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(one(i)) for i in indices]
            except BaseExceptionGroup as eg:  # surface the first item's error with its own type
                raise eg.exceptions[0] from None
            return [t.result() for t in tasks]
        finally:
            exit_batch(token)
