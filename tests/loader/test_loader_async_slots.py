"""The items of an async dataset in flight on the loader's loop (ItemSlots, LoopFetch): in all and per batch,
oldest batch first, and the slots of cancelled fetches given back."""

from __future__ import annotations

import asyncio
import threading
import time

from torch_drt.loader._item_slots import ItemSlots
from torch_drt.loader._loop_fetch import LoopFetch
from torch_drt.nodes.batch_plan import BatchPlan


async def _run(slots: ItemSlots, jobs: list[tuple[int, int]], cap: int, started: list, gates: dict) -> None:
    """Each job (batch order, item) takes a slot, notes its start and holds the slot until its gate opens."""

    async def one(order: int, item: int) -> None:
        await slots.acquire(order, cap)
        try:
            started.append((order, item))
            await gates[order, item].wait()
        finally:
            slots.release(order)

    await asyncio.gather(*(one(o, i) for o, i in jobs))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_freed_slot_goes_to_the_oldest_batch_under_its_cap():
    async def main():
        slots = ItemSlots(3)
        jobs = [(1, i) for i in range(4)] + [(2, i) for i in range(4)] + [(3, i) for i in range(2)]
        gates = {job: asyncio.Event() for job in jobs}
        started: list = []
        run = asyncio.ensure_future(_run(slots, jobs, 2, started, gates))
        await _settle()
        assert started == [(1, 0), (1, 1), (2, 0)]  # 3 in all, 2 of a batch
        gates[2, 0].set()  # batch 2 frees a slot: batch 1 is at its cap, so batch 2 takes it back
        await _settle()
        assert started[3:] == [(2, 1)]
        gates[1, 0].set()  # batch 1 frees one: its own next item, not batch 2's or 3's
        await _settle()
        assert started[4:] == [(1, 2)]
        for job in [(1, 1), (1, 2)]:
            gates[job].set()
        await _settle()
        assert started[5:] == [(1, 3), (2, 2)]  # the oldest batch first, then the next under its cap
        for gate in gates.values():
            gate.set()
        await run
        assert sorted(started) == sorted(jobs) and slots._free == 3 and not slots._batches

    asyncio.run(main())


def test_cancelled_items_give_their_slots_back():
    async def main():
        slots = ItemSlots(2)
        jobs = [(1, i) for i in range(3)] + [(2, i) for i in range(3)]
        gates = {job: asyncio.Event() for job in jobs}
        started: list = []
        run = asyncio.ensure_future(_run(slots, jobs, 2, started, gates))
        await _settle()
        assert started == [(1, 0), (1, 1)]
        run.cancel()  # two items hold slots, four wait
        await asyncio.gather(run, return_exceptions=True)
        assert slots._free == 2 and not slots._batches
        later: list = []
        gates = {(5, i): asyncio.Event() for i in range(2)}
        for gate in gates.values():
            gate.set()
        await _run(slots, list(gates), 2, later, gates)
        assert later == [(5, 0), (5, 1)]

    asyncio.run(main())


class Stuck:
    """Async items that never finish (until ``release``), counting the ones running."""

    def __init__(self, n: int) -> None:
        self.n, self.active, self.lock = n, 0, threading.Lock()
        self.release: asyncio.Event | None = None

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> int:
        if self.release is None:
            self.release = asyncio.Event()
        with self.lock:
            self.active += 1
        try:
            await self.release.wait()
            return i
        finally:
            with self.lock:
                self.active -= 1


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within 20 s"
        time.sleep(0.01)


def test_dropped_fetches_give_their_slots_back():
    ds = Stuck(16)
    fetch = LoopFetch(ds, item_concurrency=2)
    plans = [BatchPlan(0, 4 * b, list(range(4 * b, 4 * b + 4)), range(4 * b, 4 * b + 4), False) for b in range(3)]
    try:
        for plan in plans:
            fetch.begin(plan, 0, 4)  # 4 slots: batches 0 and 1 take 2 each, batch 2 waits
        _until(lambda: ds.active == 4, "four items running")
        fetch.dropped()  # two batches holding slots, one waiting
        _until(lambda: ds.active == 0, "the items cancelled")
        free = asyncio.run_coroutine_threadsafe(_free(fetch), fetch.event_loop.loop).result(20)
        assert free == (4, {})
    finally:
        fetch.event_loop.stop()


async def _free(fetch: LoopFetch) -> tuple[int, dict]:
    await asyncio.sleep(0)
    return fetch._slots._free, fetch._slots._batches
