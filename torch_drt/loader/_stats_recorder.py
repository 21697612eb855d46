"""StatsRecorder: a loader's running totals, added to by the calling thread only (workers' records come back with
their batches, ``torch_drt._stage_clock``). ``LoaderStats.of`` reads them."""

from __future__ import annotations

import os
from array import array
from typing import Any

from torch_drt._stage_clock import MAIN, BatchTimes, claim_bytes

WAITS_KEPT = 1 << 16  # the consumer's last waits kept for the percentiles
ENV = "TORCH_DRT_STATS"


def stats_enabled(stats: bool | None) -> bool:
    """``stats`` as given, else on unless the environment variable ``TORCH_DRT_STATS`` is ``0``/``false``/``off``."""
    if stats is None:
        return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")
    if not isinstance(stats, bool):
        raise ValueError(f"{stats=} must be a bool or None")
    return stats


class StatsRecorder:
    """A loader's statistics so far, in nanoseconds and counts (``torch_drt.loader.stats.LoaderStats`` reads them).

    Timing is sampled so that it costs little: one ``next()`` in ``every`` is timed, and stands for the batches
    delivered since the previous timed one. ``every`` follows the batches' smoothed speed: 1 for batches slower
    than ``EXACT_NS``, else one timed batch per ``BUDGET_NS`` (at most ``MAX_EVERY``; it at most doubles at a
    time). Batch counts and the wall time are exact; stage and wait times are sums of timed batches times their
    weights; item counts are exact for timed batches and each epoch's last, and the timed batch's size for the
    others. Bytes are exact.

    Attributes:
        every: time one batch in this many.
        stages: worker -> stage -> ``[nanoseconds, items, batches]`` (``MAIN``: the calling thread).
        busy: worker -> ``[nanoseconds, batches]`` of whole batch loads.
        bytes: counter -> bytes.
        batches, items: delivered to the caller.
        wall_ns: the caller's time with the loader (from its first ``next()`` to its last timed return).
        wait_ns: the caller's time inside ``next()`` (waiting for data, with the device copy).
        startup_ns: the waits for each iterator's first batch (worker start-up included).
        left: the calls until the next timed one, that one included, when the last iterator stopped (the next
            iterator carries the countdown on: its first call is timed only when this is 1).
        size: the usual batch's items (the last timed one's, an epoch's last excepted): untimed batches count it.
        waited: calls since the last timed one whose waits were recorded exactly (``started``), not estimated.
        waits: the last ``WAITS_KEPT`` timed waits (nanoseconds).
        in_flight, ready, deliveries: sums of the batches in flight and already loaded at each timed delivery from
            the workers, and the number of such deliveries.
        live: the running iterator (a weak reference), whose untimed batches ``flush()`` counts.
    """

    EXACT_NS = 2_000_000  # batches slower than this are all timed
    BUDGET_NS = 50_000_000  # faster ones: one timed per this much time (a timed batch costs ~15 us in a tight
    # loop, 75-105 us in a loop's real run, its code cold: one per 50 ms is ~0.2% of the time)
    MAX_EVERY = 16384  # (4096 timed a 4-6 us batch every ~20 ms: ~0.5% of the 100k-ints benchmark's time)

    def __init__(self) -> None:
        self.every = 1
        self.stages: dict[int, dict[str, list[int]]] = {}
        self.busy: dict[int, list[int]] = {}
        self.bytes: dict[str, int] = {}
        self.batches = self.items = self.wall_ns = self.wait_ns = self.startup_ns = 0
        self.waits = array("q")
        self._next_wait = 0
        self._last_ns: int | None = None
        self._last_wait = 0
        self._per_batch: int | None = None
        self.in_flight = self.ready = self.deliveries = 0
        self.live: Any = None
        self.left, self.size, self.waited = 1, 0, 0

    def merge(self, times: BatchTimes) -> None:
        """Add a worker's record of a timed batch."""
        worker, weight = times.worker, times.weight
        busy = self.busy.get(worker)
        if busy is None:
            busy = self.busy[worker] = [0, 0]
        busy[0] += times.busy_ns * weight
        busy[1] += weight
        for stage, (ns, items) in times.stages.items():
            self.add(stage, ns, items, weight, worker)
        for counter, n in times.bytes.items():
            self.bytes[counter] = self.bytes.get(counter, 0) + n

    def add(self, stage: str, ns: int, items: int = 0, weight: int = 1, worker: int = MAIN) -> None:
        """Add a timed batch's ``ns`` and ``items`` in ``stage`` on ``worker``, standing for ``weight`` batches."""
        stages = self.stages.get(worker)
        if stages is None:
            stages = self.stages[worker] = {}
        entry = stages.get(stage)
        if entry is None:
            stages[stage] = [ns * weight, items * weight, weight]
        else:
            entry[0] += ns * weight
            entry[1] += items * weight
            entry[2] += weight

    def queue(self, in_flight: int, ready: int) -> None:
        """At a timed delivery from the workers: batches in flight, and how many of them were already loaded."""
        self.in_flight += in_flight
        self.ready += ready
        self.deliveries += 1

    def counted(self, batches: int, items: int) -> None:
        """Untimed batches delivered (exactly counted)."""
        self.batches += batches
        self.items += items

    def timed(self, start_ns: int, end_ns: int, items: int | None, weight: int, first: bool) -> None:
        """A timed ``next()`` from ``start_ns`` to ``end_ns`` that delivered a batch of ``items`` (None: none) and
        stands for ``weight`` calls since the previous timed one (``first``: an iterator's first call)."""
        wait = self._last_wait = end_ns - start_ns
        interval = wait if self._last_ns is None else end_ns - self._last_ns
        self._last_ns = end_ns
        self.wall_ns += interval
        estimated, self.waited = max(1, weight - self.waited), 0
        self.wait_ns += min(wait * estimated, interval)
        if first:
            self.startup_ns += wait
        if items is not None:
            self.batches += 1
            self.items += items
            if len(self.waits) < WAITS_KEPT:
                self.waits.append(wait)
            else:
                self.waits[self._next_wait] = wait
                self._next_wait = (self._next_wait + 1) % WAITS_KEPT
        if first:  # the time since the previous iterator (another loop, a validation) says nothing of the batches
            return
        per_batch = interval // estimated  # a smoothed batch time; `every` at most doubles at a time
        self._per_batch = per_batch if self._per_batch is None else (self._per_batch + per_batch) // 2
        if self._per_batch >= self.EXACT_NS:
            self.every = 1
        else:
            target = -(-self.BUDGET_NS // max(1, self._per_batch))
            self.every = max(1, min(self.MAX_EVERY, target, 2 * self.every))

    def elapsed(self, end_ns: int, calls: int) -> None:
        """Untimed calls ended at ``end_ns`` (an epoch's end): the time since the last timed return, its wait
        estimated from the last timed one."""
        if self._last_ns is None:
            return
        interval = end_ns - self._last_ns
        self._last_ns = end_ns
        self.wall_ns += interval
        self.wait_ns += min(self._last_wait * max(0, calls - self.waited), interval)
        self.waited = 0

    def started(self, start_ns: int, end_ns: int, items: int | None) -> None:
        """An iterator's first call, from ``start_ns`` to ``end_ns``, when it is not a timed one: its wait only, the
        start-up; ``items``: the batch it delivered (None: none), counted exactly, a call of the sampling period
        whose wait is not estimated."""
        wait = end_ns - start_ns
        self.wall_ns += wait if self._last_ns is None else end_ns - self._last_ns
        self._last_ns = end_ns
        self.wait_ns += wait
        self.startup_ns += wait
        if items is not None:
            self.waited += 1
            self.batches += 1
            self.items += items

    def flush(self) -> None:
        """Count the running iterator's batches since its last timed one, and the bytes this process read outside
        batches (background prefetch) since the last timed batch."""
        live = self.live() if self.live is not None else None
        if live is not None:
            live.flush_stats()
        for counter, n in claim_bytes().items():
            self.bytes[counter] = self.bytes.get(counter, 0) + n


def count_items(indices: Any) -> int:
    """Items in a delivered batch: its indices' count."""
    try:
        return len(indices)
    except TypeError:
        return 1
