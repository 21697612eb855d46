"""An ``OrderedMapper``'s workers: the thread or process pool it maps on, and the ring slots of its transport."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch_drt._processes.pool import ProcessPool
from torch_drt._processes.transport import SharedMemoryTransport
from torch_drt._stage_clock import Recorded, WorkerIndex
from torch_drt.nodes._inline_cost import Timed
from torch_drt.nodes.thread_pool import ThreadPool


def sized_transport(transport: SharedMemoryTransport, in_flight: int, num_workers: int) -> SharedMemoryTransport:
    """``transport`` with its ring slots: as given, else a worker's share of the ``in_flight`` items, plus two."""
    if transport.slots is not None:
        return transport
    return dataclasses.replace(transport, slots=-(-in_flight // max(1, num_workers)) + 2)


def make_pool(
    map_fn: Callable[[Any], Any],
    worker_init: Callable[[int], None] | None,
    *,
    method: str,
    num_workers: int,
    multiprocessing_context: str | None,
    transport: SharedMemoryTransport,
    recorded: bool,
    adaptive: bool,
) -> tuple[ThreadPool | ProcessPool, Timed | None]:
    """The pool mapping ``map_fn`` on ``num_workers`` threads or processes, and the ``Timed`` wrapper its threads call
    when ``adaptive`` (None otherwise). With ``recorded`` (statistics on), jobs are ``(weight, item)`` pairs and each
    worker knows its index (``torch_drt._stage_clock``)."""
    fn, init = map_fn, worker_init
    if recorded:
        fn, init = Recorded(fn), WorkerIndex(init)
    if method == "thread":
        timed = Timed(fn) if adaptive else None
        return ThreadPool(timed or fn, num_workers, initializer=init, lazy=adaptive), timed
    return ProcessPool(fn, num_workers, multiprocessing_context, transport, init), None


class ItemRouting:
    """The worker an item goes to: its own ``worker``, else (processes) the next in round robin from the reset, as
    torch's loader assigns batches, so each worker's global generators see the same items in every run; threads
    (None) take the least busy worker."""

    def __init__(self, method: str) -> None:
        self.method, self.turn = method, 0

    def reset(self) -> None:
        self.turn = 0

    def worker(self, item: Any) -> int | None:
        worker = getattr(item, "worker", None)
        if worker is not None or self.method == "thread":
            return worker
        self.turn += 1
        return self.turn - 1
