"""OrderedMapper: apply a function to each item of a source on worker threads or processes, in order."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Literal, TypeVar, cast

from torchdata.nodes import BaseNode

from torch_drt._processes.pool import ProcessPool
from torch_drt._processes.transport import SharedMemoryTransport
from torch_drt.describe import described
from torch_drt.nodes._in_flight import InFlight
from torch_drt.nodes._inline_cost import InlineCost, Timed, thread_cpu_clock
from torch_drt.nodes._inline_loop import NOTHING as _NOTHING
from torch_drt.nodes._inline_loop import Countdown, inline_batches
from torch_drt.nodes._mapper_clock import MapperClock
from torch_drt.nodes._mapper_pool import ItemRouting, make_pool, sized_transport
from torch_drt.nodes._ready_wait import wait_ready
from torch_drt.nodes.thread_pool import ThreadPool

T = TypeVar("T")
R = TypeVar("R")

class OrderedMapper(BaseNode[R], Generic[T, R]):
    """Maps ``map_fn`` over ``source`` with ``num_workers`` threads or processes, yielding results in order.

    At most ``in_flight`` items are submitted ahead of the consumer. An exception raised by ``map_fn`` is
    re-raised by the ``next()`` that reaches its item, with its own type, and the following ``next()`` goes on
    with the next item. So does a ``TimeoutError`` after ``timeout`` seconds without the item's result (the stuck
    work is abandoned: a thread is replaced, a process killed and replaced) and a ``BrokenProcessPool`` when the
    process mapping the item died (it is replaced). A ``KeyboardInterrupt`` while waiting, or inside ``map_fn``
    when mapping inline, loses nothing: the same item comes next. The state is the source's state after the last
    item *delivered* (items submitted ahead are not counted), so resuming never skips or repeats an item whatever
    ``num_workers`` was.

    Threads cost a hand-off per item. With ``adaptive`` (threads only), items whose ``map_fn`` takes less than
    ``inline_below_s`` on average are mapped in the calling thread instead, once the items in flight are
    drained; if they grow slower again, the workers take over. A worker's time counts its CPU and its I/O waits,
    not its waits for the GIL (``_inline_cost``). Order and state are the same either way.

    ``reset()`` creates the workers on first use (and again in a forked child or after ``close()``); later resets
    reuse them (persistent workers). Worker threads and processes are daemons: they never keep the interpreter
    from exiting. With ``method="process"`` the function is pickled once per worker process, results' large
    tensors travel through ``transport`` (shared-memory rings), and an item whose ``worker`` attribute is an int is
    mapped on that worker (modulo ``num_workers``), which keeps per-worker caches warm.

    Args:
        source: the node whose items are mapped.
        map_fn: the function applied to each item.
        num_workers: 0 maps in the calling thread; n > 0 uses n workers.
        in_flight: items submitted ahead (default ``2 * num_workers``); at least ``num_workers``.
        method: ``"thread"`` or ``"process"``.
        multiprocessing_context: start method for processes (``"spawn"``, ``"fork"``, ``"forkserver"``).
        timeout: seconds a ``next()`` waits for its item before raising ``TimeoutError`` (0: forever).
        adaptive: map cheap items inline (threads only).
        inline_below_s: the mean ``map_fn`` time under which items are mapped inline.
        transport: how process workers hand large tensors over (default: shared-memory rings).
        worker_init: called as ``worker_init(worker_index)`` in each worker thread or process when it starts
            (a replacement worker runs it too); items mapped inline (``adaptive``) run without it.
        in_order: False delivers whichever item in flight is ready first (torch's ``in_order=False``). The state
            stays exact: the source's state before the oldest undelivered item plus the items delivered ahead of
            it, which a resume skips (``source.state_before(item, ahead)``).
        on_submit: threads only: ``on_submit(item)`` in the calling thread as each item is submitted, before a
            worker can take it (work the function starts early, e.g. fetches on an event loop).
        on_drop: threads only: ``on_drop()`` after the items submitted and not delivered were dropped (``reset``,
            ``close``), to cancel what ``on_submit`` started for them.

    Attributes:
        stats: a ``StatsRecorder`` (``torch_drt.loader._stats_recorder``) or None, set before the first ``reset()``:
            every ``stats.every``-th item is then timed on its worker (``torch_drt._stage_clock``), with the
            source's time, and the transport's and the queue at deliveries in the calling thread.
        record_next: the weight with which to time the next item mapped inline (0: none; set by the caller).
    """

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[T],
        map_fn: Callable[[T], R],
        num_workers: int = 0,
        in_flight: int | None = None,
        method: Literal["thread", "process"] = "thread",
        multiprocessing_context: str | None = None,
        timeout: float = 0,
        adaptive: bool = True,
        inline_below_s: float = 100e-6,
        transport: SharedMemoryTransport | None = None,
        worker_init: Callable[[int], None] | None = None,
        in_order: bool = True,
        on_submit: Callable[[T], None] | None = None,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"{num_workers=} must be an int >= 0")
        if method not in ("thread", "process"):
            raise ValueError(f"{method=} must be 'thread' or 'process'")
        in_flight = 2 * num_workers if in_flight is None else in_flight
        if num_workers and in_flight < num_workers:
            raise ValueError(f"{in_flight=} must be >= {num_workers=}")
        self.source = source
        self.map_fn = map_fn
        self.num_workers = num_workers
        self.in_flight = in_flight
        self.method = method
        self.multiprocessing_context = multiprocessing_context
        self.timeout = timeout
        self.adaptive = adaptive and method == "thread" and num_workers > 0
        self._cost = InlineCost(inline_below_s)
        self._adaptive_asked = adaptive
        self._given = SharedMemoryTransport() if transport is None else transport
        self.transport = self._sized(self._given)
        self.worker_init = worker_init
        self.in_order = in_order
        self.on_submit, self.on_drop = on_submit, on_drop
        self._pool: ThreadPool | ProcessPool | None = None
        self._flight = InFlight()  # submitted, not delivered yet; the delivered state
        self._routing = ItemRouting(method)
        self._exhausted = False
        self._held: Any = _NOTHING  # an inline item whose mapping was interrupted
        self._countdown: Countdown | None = None  # the statistics' countdown of the last inline_batches() loop
        self._inline = num_workers == 0
        self.stats: Any = None
        self.record_next = 0
        self._clock: MapperClock | None = None
        self._timed: Timed | None = None

    @property
    def inline_below_s(self) -> float:
        """The mean ``map_fn`` time under which items are mapped inline (``adaptive``)."""
        return self._cost.below_s

    def _sized(self, transport: SharedMemoryTransport) -> SharedMemoryTransport:
        return sized_transport(transport, self.in_flight, self.num_workers)

    def resize(self, num_workers: int, in_flight: int) -> None:
        """Run with ``num_workers`` and ``in_flight`` from the next ``reset()`` on (the workers are stopped when
        their number or their transport changes; the items pending are dropped then). Processes whose ring slots
        stay the same keep running: more or fewer items in flight only change what is submitted to them."""
        if num_workers < 0 or (num_workers and in_flight < num_workers):
            raise ValueError(f"{num_workers=} must be >= 0 and {in_flight=} >= it")
        workers, transport = self.num_workers, self.transport
        self.num_workers, self.in_flight = num_workers, in_flight
        self.transport = self._sized(self._given)
        if num_workers != workers or (self.method == "process" and self.transport != transport):
            self.close()
        self.adaptive = self._adaptive_asked and self.method == "thread" and num_workers > 0
        self._inline = num_workers == 0

    def __repr__(self) -> str:
        return described(self, self.source, self.map_fn, num_workers=self.num_workers, method=self.method,
                         in_flight=self.in_flight, in_order=None if self.in_order else False)

    def _make_pool(self) -> ThreadPool | ProcessPool:
        pool, self._timed = make_pool(
            self.map_fn, self.worker_init, method=self.method, num_workers=self.num_workers,
            multiprocessing_context=self.multiprocessing_context, transport=self.transport,
            recorded=self.stats is not None, adaptive=self.adaptive,  # recorded: jobs are (weight, item), see _submit
        )
        return pool

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._drop_pending()
        if self._countdown is not None:  # the source's reset drains the loop's run: its items left are not ticks
            self._countdown.settle()
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        self._flight.delivered = None
        self._held = _NOTHING
        self._exhausted = False
        self._routing.reset()
        if self.stats is not None and (self._clock is None or self._clock.stats is not self.stats):
            self._clock = MapperClock(self.stats)
        if self.num_workers and (self._pool is None or self._pool.pid != os.getpid()):
            self._pool = self._make_pool()  # first use, or a forked child: its parent's workers are not its own
        if self._timed is not None:
            self._timed.caller = thread_cpu_clock()  # the thread taking the results competes for the GIL too

    def _drop_pending(self) -> None:
        for task in self._flight.clear():
            assert self._pool is not None  # (items in flight: the workers have them)
            self._pool.drop(task)  # ones already running finish in the background and are discarded
        if self.on_drop is not None and self.method == "thread":
            self.on_drop()

    def _observe(self, seconds: float, inline: bool) -> None:
        """One more item's own time, measured in the calling thread (``inline``) or on a worker."""
        self._inline = self._cost.inline(seconds, self._inline, inline)

    def _submit(self) -> None:
        assert self._pool is not None
        clock = self._clock
        while not self._exhausted and len(self._flight) < self.in_flight:
            weight = clock.draw() if clock is not None else 0
            try:
                item = cast(MapperClock, clock).source(self.source, weight) if weight else self.source.next()
            except StopIteration:
                self._exhausted = True
                return
            if self.on_submit is not None and self.method == "thread":
                self.on_submit(item)
            task = self._pool.submit(item if clock is None else (weight, item), self._routing.worker(item))
            self._flight.add(self.source.state_dict(), task, item)

    def _next_inline(self) -> R:
        item = self._held
        weight, self.record_next = self.record_next if self._clock is not None else 0, 0
        if item is _NOTHING:  # reset() initialised the source: skip BaseNode.__next__'s check
            item = self._held = (cast(MapperClock, self._clock).source(self.source, weight) if weight  # (timed)
                                 else self.source.next())
            self._flight.delivered = None  # nothing in flight: the source's own state is the delivered one
        try:
            if weight:  # (a timed item: statistics on)
                seconds, result = cast(MapperClock, self._clock).inline(self.map_fn, item, weight)
                if self.adaptive:
                    self._observe(seconds, True)
            elif not self.adaptive:
                result = self.map_fn(item)
            else:
                t0 = time.perf_counter()
                result = self.map_fn(item)
                self._observe(time.perf_counter() - t0, True)
        except Exception:
            self._held = _NOTHING  # a failed item counts as delivered
            raise
        self._held = _NOTHING  # (a KeyboardInterrupt keeps it: the same item comes next)
        return result

    def next(self) -> R:
        if self._inline and (not self.num_workers or not self._flight):  # (nothing is in flight without workers)
            if self.adaptive or self._held is not _NOTHING or self.record_next:
                return self._next_inline()
            item = self._held = self.source.next()  # the plain inline path, unrolled (reset() set the source up)
            self._flight.delivered = None
            try:
                result = self.map_fn(item)
            except Exception:
                self._held = _NOTHING  # a failed item counts as delivered
                raise
            self._held = _NOTHING  # (a KeyboardInterrupt keeps it: the same item comes next)
            return result
        if not self._inline:
            self._submit()
        if not self._flight:
            raise StopIteration
        assert self._pool is not None  # (items in flight: the workers have them)
        index = wait_ready(self._pool, self._flight, self.in_order, self.timeout)  # Ctrl-C leaves the items pending
        task = self._flight.take(index or 0)
        if index is None:
            self._pool.abandon(task)
            raise TimeoutError(
                f"no result from the workers after {self.timeout}s (timeout={self.timeout}); the "
                "batch was abandoned and loading goes on"
            )
        if not self._inline:
            self._submit()
        if self._clock is not None:
            self.record_next = 0
            return self._clock.deliver(self, task)
        result = self._pool.result(task)
        if self.adaptive:
            seconds, result = result
            self._observe(seconds, False)
        return result

    def inline_batches(self, ticks: Countdown | None = None) -> Iterator[R]:
        """``next()``'s results as a generator (one resume per item, no call per stage), for a caller at 0 workers or
        with ``adaptive`` threads.

        The items the source has planned (its ``planned()`` iterator: ``BatchPlanner``) are mapped in a loop while
        they are mapped in the calling thread, the state after each as ``next()`` leaves it; everything else (an
        item to plan, a timed one, an interrupted one, the workers' items) goes through ``next()``. It ends at the
        source's end or at the first exception, as a generator does: ask for a new one then. ``ticks``: a countdown
        of the items to map before it returns ``DUE`` (``torch_drt.nodes._inline_loop.inline_batches``).
        """
        return inline_batches(self, ticks)  # (the module function: the loop)

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._flight.state(self.source, () if self._held is _NOTHING else (self._held,))}

    def starts_processes(self) -> bool:
        """Whether the next ``reset()`` starts worker processes (none of this process runs yet)."""
        return self.method == "process" and self.num_workers > 0 and getattr(self._pool, "pid", None) != os.getpid()

    def worker_pids(self) -> list[int]:
        """The worker processes' pids (none for threads or before the first ``reset()``)."""
        return self._pool.pids() if isinstance(self._pool, ProcessPool) else []

    def close(self) -> None:
        """Drop pending items and stop the workers (a later ``reset()`` starts new ones)."""
        if self._pool is not None:
            self._drop_pending()
            self._pool.close()
        self._pool = None
