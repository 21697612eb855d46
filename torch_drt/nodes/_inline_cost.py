"""InlineCost: when ``OrderedMapper(adaptive=True)`` maps items in the calling thread instead of its worker threads.

Two clocks decide. On a worker thread an item's wall time includes its waits for the GIL while the other workers
or the calling thread run Python, waits that mapping in the calling thread would not have, so a worker reports the
item's *own* time (``Timed``, ``own_seconds``): its wall time less the waits that those threads' CPU time explains
(its CPU time, I/O and sleeps count: mapping inline would wait as long; so do the threads an item starts itself).
In the calling thread the wall time is the item's own time already.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from time import perf_counter_ns, thread_time_ns
from typing import Any

PREEMPTED = 8  # a GIL holder may run 1/PREEMPTED of the time on a loaded machine: its CPU bounds our waits x this


def own_seconds(wall_ns: int, cpu_ns: int, others_ns: int) -> float:
    """The time an item measured on a worker thread would take in the calling thread, in seconds.

    Args:
        wall_ns: the item's wall time on the worker.
        cpu_ns: the worker thread's CPU time for it.
        others_ns: the CPU time of the threads it competes with for the GIL (the other workers, the calling
            thread) meanwhile.

    The worker waited ``wall_ns - cpu_ns``: for the GIL while another of those threads ran (at most ``PREEMPTED``
    times their CPU time: a thread holding the GIL may be preempted too), the rest for I/O, which counts.
    """
    waited = max(0, wall_ns - cpu_ns)
    return (wall_ns - min(waited, PREEMPTED * max(0, others_ns))) / 1e9


def thread_cpu_clock() -> int | None:
    """The calling thread's CPU-time clock (None where the platform has none)."""
    getter = getattr(time, "pthread_getcpuclockid", None)
    return None if getter is None else getter(threading.get_ident())


def _cpu_ns(clock: int | None) -> int:
    if clock is None:
        return 0
    try:
        return time.clock_gettime_ns(clock)
    except OSError:  # the thread has exited
        return 0


class Timed:
    """``fn`` returning ``(seconds, result)`` on a worker thread: the item's own time (``own_seconds``).

    Attributes:
        caller: the CPU-time clock of the thread that takes the results (``thread_cpu_clock``; None: not counted).
        spent_ns: the workers' CPU time on the items finished so far; the others' time of an item is its growth
            while the item runs, plus the caller's (an update lost to a thread switch only makes it cautious).
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.caller: int | None = None
        self.spent_ns = 0

    def __call__(self, item: Any) -> tuple[float, Any]:
        caller = self.caller
        s0, m0, c0, w0 = self.spent_ns, _cpu_ns(caller), thread_time_ns(), perf_counter_ns()
        result = self.fn(item)
        w1, c1, m1 = perf_counter_ns(), thread_time_ns(), _cpu_ns(caller)
        cpu = c1 - c0
        others = self.spent_ns - s0 + (m1 - m0 if m0 and m1 else 0)
        self.spent_ns += cpu
        return own_seconds(w1 - w0, cpu, others), result


class InlineCost:
    """The mean own time of ``map_fn`` (an exponential moving average) and what it says: map inline once the
    workers' items bring it under ``below_s`` (a hand-off to a worker would cost more), back on the workers once
    the calling thread's items take it over four times that.

    A stage that comes back to the workers within ``WARMUP`` items (the workers' clocks misjudged it: an I/O wait
    while the threads it competes with were busy) is measured there on twice as many items as before it may go
    inline again (up to ``MAX_HOLD``), so it does not swing between the two; one that stayed longer (it grew
    slower) may go back after ``WARMUP`` items.

    Args:
        below_s: the mean time under which items are mapped inline.
    """

    WARMUP = 8  # items timed on the workers before the mean decides anything
    ALPHA = 0.1
    MAX_HOLD = 1024

    def __init__(self, below_s: float) -> None:
        self.below_s = below_s
        self.mean: float | None = None
        self.hold = self.WARMUP  # items measured on the workers before going inline
        self._samples = 0  # items measured in the current mode

    def inline(self, seconds: float, inline: bool, measured_inline: bool) -> bool:
        """Whether to map inline, given one more item's own time ``seconds``, whether items are mapped inline now
        and whether this one was (a worker's item delivered after the switch to inline is ignored)."""
        if measured_inline != inline:
            return inline
        self._samples += 1
        self.mean = seconds if self.mean is None else self.mean + self.ALPHA * (seconds - self.mean)
        if not inline and self._samples >= self.hold and self.mean < self.below_s:
            self._samples = 0
            return True  # the caller stops submitting; what is in flight drains first, in order
        if inline and self.mean > 4 * self.below_s:
            self.hold = min(2 * self.hold, self.MAX_HOLD) if self._samples <= self.WARMUP else self.WARMUP
            self._samples = 0
            return False
        return inline
