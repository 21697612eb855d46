"""Datasets whose __getitem__ is async def: one event loop per loader, concurrency, aclose."""

from __future__ import annotations

import asyncio
import threading

import pytest

from torch_drt import StatefulDataLoader


class Slow:
    """An async dataset: each item sleeps, records the loop it ran on and the peak concurrency."""

    def __init__(self, n: int, delay: float = 0.02, fail: int | None = None) -> None:
        self.n, self.delay, self.fail = n, delay, fail
        self.loops: set[int] = set()
        self.active = 0
        self.peak = 0
        self.closed = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> int:
        self.loops.add(id(asyncio.get_running_loop()))
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
            if i == self.fail:
                raise LookupError(f"item {i} is gone")
            return i
        finally:
            with self._lock:
                self.active -= 1

    async def aclose(self) -> None:
        self.closed += 1


def test_async_items_in_flight_and_one_loop_across_epochs():
    ds = Slow(64)
    loader = StatefulDataLoader(ds, batch_size=16, num_workers=2, item_concurrency=8, collate_fn=list,
                                worker_method="thread")
    first = [x for b in loader for x in b]
    second = [x for b in loader for x in b]
    assert first == second == list(range(64))
    assert ds.peak > 8  # two batches of up to 8 items each were in flight together
    assert len(ds.loops) == 1  # the same loop served both epochs
    loader.close()
    assert ds.closed == 1
    loader.close()
    assert ds.closed == 1  # awaited once


def test_async_errors_keep_their_type_and_the_next_batch_follows():
    loader = StatefulDataLoader(Slow(8, delay=0.001, fail=3), batch_size=2, num_workers=1, item_concurrency=2,
                                collate_fn=list)
    it = iter(loader)
    assert next(it) == [0, 1]
    with pytest.raises(LookupError, match="item 3 is gone"):
        next(it)
    assert next(it) == [4, 5]


def test_aclose_runs_when_the_loader_is_dropped():
    import gc

    ds = Slow(4, delay=0)
    loader = StatefulDataLoader(ds, batch_size=2, collate_fn=list)
    assert [x for b in loader for x in b] == [0, 1, 2, 3]
    del loader
    gc.collect()
    assert ds.closed == 1


class ReturnsCoroutine:
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        async def helper():
            return i

        return helper()


def test_plain_getitem_returning_a_coroutine_is_a_type_error():
    with pytest.raises(TypeError, match="returned a coroutine"):
        next(iter(StatefulDataLoader(ReturnsCoroutine(), batch_size=2, collate_fn=list)))
