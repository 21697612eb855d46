"""HttpDataset through a loader with thread workers: the requests in flight across batch boundaries, counted by a
real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import collections
import contextlib

from aiohttp import web
from http_server import Server

from torch_drt import HttpDataset, StatefulDataLoader

ITEMS, BATCH, WORKERS, CONCURRENCY = 64, 8, 2, 4
TOTAL = WORKERS * CONCURRENCY  # requests in flight at most: num_workers x item_concurrency
SLOW = BATCH - 1  # the last item of the first batch: held until the server saw TOTAL requests in flight
DELAY_S = 0.1  # every other request
HOLD_S = 3.0  # how long the slow one waits at most for the others (the old loader never got there)


class Flight:
    """The server's view: requests in flight (in all, per batch), and the most in flight while the slow item waited
    with the rest of its batch done, i.e. while its batch's other slots could only serve later batches."""

    def __init__(self, hold: bool = True) -> None:
        self.hold = hold
        self.hits: collections.Counter = collections.Counter()
        self.now = self.peak = self.batch_peak = self.alone_peak = 0
        self.per_batch: collections.Counter = collections.Counter()
        self.rest_of_first = BATCH - 1  # the slow item's batch-mates not answered yet
        self.slow_waiting = False
        self.full: asyncio.Event | None = None

    def app(self) -> web.Application:
        self.full = asyncio.Event()  # on the server's loop
        app = web.Application()
        app.add_routes([web.get("/item/{n}", self.item)])
        return app

    def _note(self) -> None:
        if self.slow_waiting and not self.rest_of_first:
            self.alone_peak = max(self.alone_peak, self.now)
            if self.now >= TOTAL:
                self.full.set()

    async def item(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        batch = n // BATCH
        self.hits[n] += 1
        self.now += 1
        self.per_batch[batch] += 1
        self.peak, self.batch_peak = max(self.peak, self.now), max(self.batch_peak, self.per_batch[batch])
        try:
            if n == SLOW and self.hold:
                self.slow_waiting = True
                self._note()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.full.wait(), HOLD_S)
                self.slow_waiting = False
            else:
                self._note()
                await asyncio.sleep(DELAY_S)
            return web.Response(body=bytes([n]) * 16)
        finally:
            self.now -= 1
            self.per_batch[batch] -= 1
            if batch == 0 and n != SLOW:
                self.rest_of_first -= 1
            self._note()


def test_a_batch_waiting_on_its_slowest_item_leaves_its_slots_to_the_next_batches():
    flight = Flight()
    server = Server(app=flight.app)
    try:
        ds = HttpDataset([server.url(f"/item/{i}") for i in range(ITEMS)])
        loader = StatefulDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, item_concurrency=CONCURRENCY,
                                    collate_fn=list, worker_method="thread")
        got = [body for batch in loader for body in batch]
        loader.close()
    finally:
        server.stop()
    assert got == [bytes([i]) * 16 for i in range(ITEMS)]  # the same items in the same order
    assert flight.hits == collections.Counter(range(ITEMS))  # each requested once
    assert flight.peak <= TOTAL and flight.batch_peak <= CONCURRENCY  # both limits hold
    # while batch 0 waited on its last item, the later batches had the other TOTAL - 1 requests in flight (the
    # old loader: 1 + CONCURRENCY, the other worker's batch only)
    assert flight.alone_peak == TOTAL


def test_batches_started_ahead_are_cancelled_by_a_new_epoch_and_give_their_slots_back():
    flight = Flight(hold=False)  # every request takes DELAY_S
    server = Server(app=flight.app)
    items = [bytes([i]) * 16 for i in range(ITEMS // 2)]
    try:
        ds = HttpDataset([server.url(f"/item/{i}") for i in range(len(items))])

        def loader():
            return StatefulDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, item_concurrency=CONCURRENCY,
                                      collate_fn=list, worker_method="thread", timeout=30)

        first = loader()
        it = iter(first)
        head = [body for _ in range(2) for body in next(it)]
        state = first.state_dict()  # the next batches are in flight: some items hold slots, some wait for one
        epochs = [[body for batch in first for body in batch] for _ in range(2)]  # (dropped: cancelled)
        first.close()
        resumed = loader()
        resumed.load_state_dict(state)
        rest = [body for batch in resumed for body in batch]
        resumed.close()
    finally:
        server.stop()
    assert head == items[: 2 * BATCH] and rest == items[2 * BATCH :]  # the batches started ahead are not counted
    assert epochs[0] == epochs[1] == items
