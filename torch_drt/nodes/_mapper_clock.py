"""MapperClock: what ``OrderedMapper`` records when statistics are on (``OrderedMapper.stats``).

It picks the items to time (one in ``stats.every``: a timed item stands for the items submitted since the previous
one), times the source in the calling thread, runs inline items through ``Recorded``, and at each delivery from the
workers times the transport, adds the worker's record and the queue's depth.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from torch_drt._stage_clock import Recorded


class MapperClock:
    """One ``OrderedMapper``'s sampling and calling-thread records into ``stats`` (a ``StatsRecorder``)."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self.period = self.countdown = 1
        self._recorded: Recorded | None = None

    def draw(self) -> int:
        """The weight to time the next submitted item with (0: untimed)."""
        self.countdown -= 1
        if self.countdown > 0:
            return 0
        weight, self.period = self.period, self.stats.every
        self.countdown = self.period
        return weight

    def source(self, source: Any, weight: int) -> Any:
        """``source.next()``, timed (``StopIteration`` passes through)."""
        t0 = perf_counter_ns()
        item = source.next()
        self.stats.add("source", perf_counter_ns() - t0, 0, weight)
        return item

    def inline(self, fn: Any, item: Any, weight: int) -> tuple[float, Any]:
        """``fn(item)`` in the calling thread, timed: ``(seconds, result)``."""
        if self._recorded is None or self._recorded.fn is not fn:
            self._recorded = Recorded(fn)
        times, result = self._recorded.record(item, weight)
        self.stats.merge(times)
        return times.busy_ns / 1e9, result

    def deliver(self, mapper: Any, task: Any) -> Any:
        """``mapper``'s result of ``task`` from its pool: the transport's time; a timed job's record and the queue."""
        stats, pool = self.stats, mapper._pool
        t0 = perf_counter_ns()
        result = pool.result(task)
        if mapper.method == "process":
            stats.add("transport", perf_counter_ns() - t0, 0, 1)
        if mapper.adaptive:
            seconds, result = result
            mapper._observe(seconds, False)
        times, result = result
        if times is not None:
            stats.merge(times)
        if times is not None and times.weight:
            pending = mapper._flight.tasks()
            stats.queue(len(pending) + 1, 1 + sum(1 for task in pending if pool.done(task)))
        return result
