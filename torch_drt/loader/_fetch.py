"""The fetch stage of a map-style or node loader: items (sync, concurrent or async), transform, collate, pin.

Each batch is loaded inside its batch scope (``torch_drt.random``): the loader's seed, the epoch, the items'
indices and global positions, so ``item_generator`` works in ``__getitem__`` and ``transform``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from types import FunctionType
from typing import Any

from torch_drt._stage_clock import BatchTimes
from torch_drt.describe import described
from torch_drt.loader._arguments import Unbatched
from torch_drt.loader._collate import pin_batch
from torch_drt.loader._early_items import EarlyItems, results, submit_items
from torch_drt.loader._event_loop import is_async_dataset
from torch_drt.loader._loop_fetch import LoopFetch
from torch_drt.loader.iterator import Fetched
from torch_drt.loader.transform_rule import transform_hook
from torch_drt.nodes.batch_plan import BatchPlan
from torch_drt.nodes.thread_pool import ThreadPool
from torch_drt.random import BatchSlot, batch_slot, current_slot, enter_batch, exit_batch, map_items

_SEQUENCES: set[type] = {list, tuple}  # types seen to be sequences (an ABC's isinstance is a Python-level call)
_MAX_SEQUENCES = 64  # (types made per call are not all kept)


def _no_coroutines(dataset: Any, items: list[Any]) -> None:
    if items and inspect.iscoroutine(items[0]):
        for item in items:
            item.close()
        raise TypeError(
            f"{type(dataset).__name__}.__getitem__ returned a coroutine: declare it 'async def' or await the helper "
            "it calls"
        )


class BatchFetcher:
    """Turns a ``BatchPlan`` into ``(batch, indices, last)`` (``Fetched``); runs on the loader's workers.

    Items come from ``__getitems__(indices)`` when the dataset has it and ``item_concurrency == 1``, else one
    ``__getitem__`` per item, ``item_concurrency`` at a time (threads, or coroutines on the loader's event loop
    for an ``async def __getitem__``/``__getitems__``: ``LoopFetch``); item by item on thread workers, a batch's
    items start as it is submitted (``starts_early``: ``EarlyItems``, ``LoopFetch``). ``transform(index, item)``
    is applied to each item, then ``collate_fn`` to the list. It pickles without its pools and loop, which a worker
    process rebuilds.

    Args:
        dataset: a map-style dataset (sync or async).
        transform: ``transform(index, item) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        item_concurrency: items of one batch fetched at once.
        pin: pin the batch's tensors (thread workers; process workers pin when unpacking).
        seed: the loader's seed, keying the items' random generators.
        item_threads: threads fetching items (``num_workers x item_concurrency``).
    """

    def __init__(
        self,
        dataset: Any,
        transform: Callable[[int, Any], Any] | None,
        collate_fn: Callable[[Sequence[Any]], Any],
        item_concurrency: int = 1,
        pin: bool = False,
        seed: int = 0,
        item_threads: int = 1,
    ) -> None:
        self.dataset = dataset
        self.transform = transform_hook(transform)
        self.collate_fn = collate_fn
        self.item_concurrency = item_concurrency
        self.pin = pin
        self.seed = seed
        self.item_threads = item_threads
        self.is_async = is_async_dataset(dataset)
        self.loop_fetch = LoopFetch(dataset, item_concurrency) if self.is_async else None
        self.starts_early = self.loop_fetch.by_item if self.loop_fetch is not None else item_concurrency > 1  # begin()
        self._early = EarlyItems()  # the sync items begun so
        self.item_pool: ThreadPool | None = None
        self._checked = False  # whether a plain __getitem__ was seen not to return coroutines
        self._getitems = self._batch_getter()
        self._getitem: Any = getattr(dataset, "__getitem__", None)  # (the dataset's own: a map-style one has it)
        # a Python __getitem__ is called from a comprehension: the interpreter runs it in its own loop, without the
        # C call and new interpreter frame per item that map() makes (~30% of the calls' cost on Python 3.11)
        self._in_frame = isinstance(getattr(type(dataset), "__getitem__", None), FunctionType)
        self._plain = not self.is_async and self._getitems is None and item_concurrency == 1 and transform is None
        self._quick = False  # plain, unpinned, and its items seen not to be coroutines: __call__'s inline case
        # __call__'s other inline case: a sync __getitems__ and nothing more (no transform or pinning)
        self._batched = not self.is_async and self._getitems is not None and transform is None and not pin

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "item_pool": None, "_getitems": None, "_getitem": None, "_early": EarlyItems()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._getitems = self._batch_getter()
        self._getitem = getattr(self.dataset, "__getitem__", None)

    def _batch_getter(self) -> Any:
        """The dataset's ``__getitems__`` where a batch's items come from it: one item at a time, and batching (as
        torch, which without batching, ``batch_size=None``, calls ``__getitem__``)."""
        if self.item_concurrency != 1 or isinstance(self.collate_fn, Unbatched):
            return None
        return getattr(self.dataset, "__getitems__", None)

    @property
    def plain(self) -> bool:
        """Whether a batch is the collated items of one ``__getitem__`` each, nothing more (sync, one item at a time,
        no ``__getitems__``, transform or pinning)."""
        return self._plain and not self.pin

    @property
    def in_caller(self) -> bool:
        """Whether a batch is the work of one call in the thread that asks for it (sync, one item at a time: nothing
        started ahead on item threads or an event loop), which the inline loop may call in turn."""
        return not self.is_async and self.item_concurrency == 1

    def __repr__(self) -> str:
        return described(self, self.dataset, transform=self.transform, collate_fn=self.collate_fn,
                         item_concurrency=self.item_concurrency if self.item_concurrency > 1 else None)

    def start(self, method: str) -> None:
        """Before an epoch: start the event loop of an async dataset (thread workers; processes make their own)."""
        if self.loop_fetch is not None and method == "thread":
            self.loop_fetch.event_loop.start(getattr(self.dataset, "aclose", None))

    def close_items(self) -> None:
        """Stop the item threads (the next batch starts new ones)."""
        if self.item_pool is not None:
            self.item_pool.close()
            self.item_pool = None

    def close(self) -> None:
        """Stop the item threads and the event loop (awaiting the dataset's ``aclose()``)."""
        self.dropped()
        self.close_items()
        if self.loop_fetch is not None:
            self.loop_fetch.event_loop.stop(getattr(self.dataset, "aclose", None))

    def begin(self, plan: BatchPlan) -> None:
        """Start fetching ``plan``'s items on the event loop or the item threads (``starts_early``: as it is
        submitted to a worker thread, which then waits for them)."""
        if self.loop_fetch is not None:
            self.loop_fetch.begin(plan, self.seed, self.item_threads)
        elif len(plan.indices) > 1:  # (one item is fetched by the worker itself)
            self._early.begin(self._pool(), plan)

    def dropped(self) -> None:
        """Cancel the fetches ``begin`` started for batches no worker took (the loader dropped them)."""
        if self.loop_fetch is not None:
            self.loop_fetch.dropped()
        self._early.dropped()

    def _pool(self) -> ThreadPool:
        pool = self.item_pool
        if pool is None or pool.pid != os.getpid():  # first use, or a forked child
            pool = self.item_pool = ThreadPool(self._one, self.item_threads, name="torch_drt-item")
        return pool

    def _one(self, job: tuple[int, int, int]) -> Any:
        """One item in its own scope (item threads do not see the batch's context)."""
        epoch, index, position = job
        token = enter_batch(self.seed, epoch, (index,), (position,))
        try:
            item = self.dataset[index]
            _no_coroutines(self.dataset, [item])
            return item if self.transform is None else map_items(self.transform, (index,), (item,), (position,))[0]
        finally:
            exit_batch(token)

    def _items(self, plan: BatchPlan) -> Sequence[Any]:
        items, transformed = self._raw_items(plan)
        return items if transformed else self._transformed(plan, items)

    def _transformed(self, plan: BatchPlan, items: Sequence[Any]) -> Sequence[Any]:
        return items if self.transform is None else map_items(self.transform, plan.indices, items, plan.positions)

    def _raw_items(self, plan: BatchPlan) -> tuple[Sequence[Any], bool]:
        """The plan's items, and whether they are transformed already (item threads transform each item)."""
        indices = plan.indices
        if self._getitems is not None:
            items = self._batch_items(indices)
        elif self.item_concurrency > 1 and len(indices) > 1:
            return results(self._early.take(plan) or submit_items(self._pool(), plan)), True
        else:
            getitem = self._getitem
            items = [getitem(i) for i in indices] if self._in_frame else list(map(getitem, indices))
            if not self._checked:
                _no_coroutines(self.dataset, items)
                self._checked = bool(items)
                self._quick = self._checked and self.plain
        return items, False

    def _batch_items(self, indices: list[int]) -> Sequence[Any]:
        """``__getitems__(indices)``: a sequence goes to collate_fn as it is (as in torch)."""
        items = self._getitems(indices)
        kind = type(items)
        if kind not in _SEQUENCES:
            if not isinstance(items, Sequence):
                items = list(items)
            elif items.__class__ is kind and len(_SEQUENCES) < _MAX_SEQUENCES:  # (a proxy's class is per object)
                _SEQUENCES.add(kind)
        if len(items) != len(indices):
            raise ValueError(f"__getitems__ returned {len(items)} items for {len(indices)} indices")
        return items

    def _async_items(self, plan: BatchPlan) -> Sequence[Any]:
        return self._transformed(plan, self._loop_items(plan))

    def _loop_items(self, plan: BatchPlan) -> Sequence[Any]:
        return self.loop_fetch.items(plan, self.seed, self.item_threads)  # type: ignore[union-attr]

    records_stages = True  # called as fetcher(plan, times) when statistics are on (torch_drt._stage_clock)

    def __call__(self, plan: BatchPlan, times: BatchTimes | None = None) -> Fetched:
        slot = current_slot()  # this thread's batch slot, read in C (batch_slot() makes it on first use)
        if type(slot) is not BatchSlot:
            slot = batch_slot()
            if slot is None:  # inside a user's batch_scope: a scope of our own
                token = enter_batch(self.seed, plan.epoch, plan.indices, plan.positions)
                try:
                    return self._load(plan) if times is None else self._timed_load(plan, times)
                finally:
                    exit_batch(token)
        epoch, _, indices, positions, last = plan
        slot.batch = [self.seed, epoch, indices, positions]
        try:
            if times is not None:
                return self._timed_load(plan, times)
            if not self._quick:
                if self._batched:
                    return self.collate_fn(self._batch_items(indices)), indices, last
                return self._load(plan)
            getitem = self._getitem  # the common case, inline: this costs a few attribute reads
            items = [getitem(i) for i in indices] if self._in_frame else list(map(getitem, indices))
            return self.collate_fn(items), indices, last
        finally:
            slot.batch = None

    def _load(self, plan: BatchPlan) -> Fetched:
        items = self._async_items(plan) if self.is_async else self._items(plan)
        batch = self.collate_fn(items)
        return pin_batch(batch) if self.pin else batch, plan.indices, plan.last

    def _timed_load(self, plan: BatchPlan, times: BatchTimes) -> Fetched:
        """``_load``, each stage's time added to ``times``."""
        t0 = perf_counter_ns()
        if self.is_async:
            items, transformed = self._loop_items(plan), False  # (a list)
        else:
            items, transformed = self._raw_items(plan)
        t1 = perf_counter_ns()
        n = len(items)
        times.add("dataset", t1 - t0, n)
        if self.transform is not None and not transformed:
            items = self._transformed(plan, items)
            t0, t1 = t1, perf_counter_ns()
            times.add("transform", t1 - t0, n)
        batch = self.collate_fn(items)
        t0, t1 = t1, perf_counter_ns()
        times.add("collate", t1 - t0, n)
        if self.pin:
            batch = pin_batch(batch)
            times.add("pin", perf_counter_ns() - t1, n)
        return batch, plan.indices, plan.last
