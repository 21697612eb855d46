"""Fetching one batch on a worker: items (sync, concurrent or async), transform, collate, pin."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch_drt.nodes.batch_plan import BatchPlan

__all__ = ["BatchFetcher", "EventLoopThread", "ItemBatchFetcher", "default_collate", "is_async_dataset"]

logger = logging.getLogger("torch_drt.loader")


def default_collate(batch: list[Any]) -> Any:
    """torch's ``default_collate``, except that an empty batch (a padded rank) collates to ``[]``."""
    if not batch:
        return []
    from torch.utils.data import default_collate as torch_collate

    return torch_collate(batch)


class _ItemOnly:
    """Adapts a one-argument transform (``torch_drt.transforms.Compose``) to ``transform(index, item)``."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, index: int, item: Any) -> Any:
        return self.fn(item)


def _two_arg(transform: Any) -> Callable[[int, Any], Any] | None:
    from torch_drt.transforms.base import Transform

    return _ItemOnly(transform) if isinstance(transform, Transform) else transform


def is_async_dataset(dataset: Any) -> bool:
    """True when the dataset's ``__getitem__`` is ``async def`` or it has an ``async def aget(index)``."""
    cls = type(dataset)
    return inspect.iscoroutinefunction(getattr(cls, "__getitem__", None)) or inspect.iscoroutinefunction(
        getattr(cls, "aget", None)
    )


class EventLoopThread:
    """One asyncio event loop on a daemon thread, kept across epochs; ``start()`` creates the thread."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop thread if it is not running (called from a node's ``reset()``)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="torch_drt-event-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if self.loop is None:
            self.start()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self, aclose: Callable[[], Any] | None = None, timeout: float = 5.0) -> None:
        """Await ``aclose()`` once on the loop (errors and time-outs are logged), then stop the loop."""
        if self.loop is None or self._thread is None:
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


class BatchFetcher:
    """Turns a ``BatchPlan`` into ``(plan, batch)``; runs on the loader's workers.

    Items come from ``__getitems__(indices)`` when the dataset has it and ``item_concurrency == 1``, else one
    ``__getitem__`` per item, ``item_concurrency`` at a time (threads, or coroutines on the loader's event loop
    for an ``async def __getitem__``). ``transform(index, item)`` is applied to each item, then ``collate_fn``
    to the list. It pickles without its pools and loop, which a worker process rebuilds on first use.

    Args:
        dataset: a map-style dataset (sync or async ``__getitem__``).
        transform: ``transform(index, item) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        item_concurrency: items of one batch fetched at once.
        pin: pin the batch's tensors (CUDA only).
    """

    def __init__(
        self,
        dataset: Any,
        transform: Callable[[int, Any], Any] | None,
        collate_fn: Callable[[list[Any]], Any],
        item_concurrency: int = 1,
        pin: bool = False,
    ) -> None:
        self.dataset = dataset
        self.transform = _two_arg(transform)
        self.collate_fn = collate_fn
        self.item_concurrency = item_concurrency
        self.pin = pin
        self.is_async = is_async_dataset(dataset)
        getitems = getattr(dataset, "__getitems__", None)
        self._getitems = getitems if callable(getitems) and item_concurrency == 1 else None
        self.item_pool: ThreadPoolExecutor | None = None
        self.event_loop: EventLoopThread | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["item_pool"] = None
        state["event_loop"] = None
        state["_getitems"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        getitems = getattr(self.dataset, "__getitems__", None)
        self._getitems = getitems if callable(getitems) and self.item_concurrency == 1 else None

    def _one(self, index: int) -> Any:
        item = self.dataset[index]
        if inspect.iscoroutine(item):
            item.close()
            raise TypeError(
                f"{type(self.dataset).__name__}.__getitem__ returned a coroutine: declare it 'async def' "
                "or await the helper it calls"
            )
        return item if self.transform is None else self.transform(index, item)

    def _sync_items(self, indices: list[int]) -> list[Any]:
        if self._getitems is not None and not self.is_async:
            items = list(self._getitems(indices))
            if len(items) != len(indices):
                raise ValueError(f"__getitems__ returned {len(items)} items for {len(indices)} indices")
            if self.transform is not None:
                items = [self.transform(i, x) for i, x in zip(indices, items)]
            return items
        if self.transform is None and self.item_concurrency == 1 and indices:
            items = list(map(self.dataset.__getitem__, indices))
            if inspect.iscoroutine(items[0]):
                for item in items:
                    item.close()
                raise TypeError(
                    f"{type(self.dataset).__name__}.__getitem__ returned a coroutine: declare it 'async def' "
                    "or await the helper it calls"
                )
            return items
        if self.item_concurrency > 1 and len(indices) > 1:
            if self.item_pool is None:  # a worker process builds its own pool on first use
                self.item_pool = ThreadPoolExecutor(self.item_concurrency, thread_name_prefix="torch_drt-item")
            return list(self.item_pool.map(self._one, indices))
        return [self._one(i) for i in indices]

    async def _gather(self, indices: Sequence[int]) -> list[Any]:
        getitems = getattr(self.dataset, "__getitems__", None)
        if self.item_concurrency == 1 and inspect.iscoroutinefunction(getitems):
            items = list(await getitems(list(indices)))
            if len(items) != len(indices):
                raise ValueError(f"__getitems__ returned {len(items)} items for {len(indices)} indices")
            return items
        semaphore = asyncio.Semaphore(self.item_concurrency)
        get = getattr(self.dataset, "aget", None) or self.dataset.__getitem__

        async def one(index: int) -> Any:
            async with semaphore:
                return await get(index)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(i)) for i in indices]
        except BaseExceptionGroup as eg:  # surface the first item's error with its own type
            raise eg.exceptions[0] from None
        return [t.result() for t in tasks]

    def _async_items(self, indices: list[int]) -> list[Any]:
        if self.event_loop is None:
            self.event_loop = EventLoopThread()
        items = self.event_loop.run(self._gather(indices))
        if self.transform is not None:
            items = [self.transform(i, x) for i, x in zip(indices, items)]
        return items

    def __call__(self, plan: BatchPlan) -> tuple[BatchPlan, Any]:
        indices = plan.indices
        items = self._async_items(indices) if self.is_async else self._sync_items(indices)
        batch = self.collate_fn(items)
        if self.pin:
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)
        return plan, batch


class ItemBatchFetcher:
    """Turns an ``ItemBatch`` from a node into ``(batch, collated)``: transform, collate, pin (picklable).

    Args:
        transform: ``transform(position, item) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        pin: pin the batch's tensors (CUDA only).
    """

    def __init__(
        self, transform: Callable[[int, Any], Any] | None, collate_fn: Callable[[list[Any]], Any], pin: bool = False
    ) -> None:
        self.transform, self.collate_fn, self.pin = _two_arg(transform), collate_fn, pin

    def __call__(self, batch: Any) -> tuple[Any, Any]:
        items = batch.items
        if self.transform is not None:
            items = [self.transform(i, x) for i, x in zip(batch.indices, items)]
        out = self.collate_fn(items)
        if self.pin:
            from torch.utils.data._utils.pin_memory import pin_memory

            out = pin_memory(out)
        return batch, out
