"""Where a batch's load time goes, recorded on the thread that loads it (a worker thread or process, or the caller).

``OrderedMapper`` runs each batch's function inside ``Recorded``: it opens a ``BatchTimes`` on the thread, the
fetch stage adds its stages' times to it (``current()``; nothing is recorded when no batch is open), and the
``BatchTimes`` travels back with the batch's result (a process worker's inside the reply it already sends), where
the loader's ``StatsRecorder`` adds it up. Bytes read outside a timed batch (a process's background prefetch, an
untimed batch) are kept here and go back with that process's next batch (every batch from a worker; in the calling
thread, when ``loader.stats()`` is read).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

MAIN = -1  # the worker index of batches loaded in the calling thread

_local = threading.local()
_unclaimed: dict[str, int] = {}  # bytes counted outside a batch in this process
_unclaimed_lock = threading.Lock()
os.register_at_fork(after_in_child=_unclaimed.clear)  # a forked worker's bytes are its own


class BatchTimes:
    """A sampled batch's record: the worker that loaded it, its whole time, per stage ``[nanoseconds, items]``, and
    its ``weight``: the batches it stands for (timing is sampled, ``StatsRecorder``).

    Attributes:
        worker: the worker index (``MAIN`` for the calling thread).
        weight: batches this record stands for.
        busy_ns: the batch's whole load time on that worker.
        stages: stage name -> ``[nanoseconds, items]``.
        bytes: counter name -> bytes (``count_bytes``; exact, never weighted).
    """

    __slots__ = ("busy_ns", "bytes", "stages", "weight", "worker")

    def __init__(self, worker: int, weight: int = 1) -> None:
        self.worker, self.weight, self.busy_ns = worker, weight, 0
        self.stages: dict[str, list[int]] = {}
        self.bytes: dict[str, int] = {}

    def add(self, stage: str, ns: int, items: int = 0) -> None:
        """Add ``ns`` nanoseconds and ``items`` to ``stage``."""
        entry = self.stages.get(stage)
        if entry is None:
            self.stages[stage] = [ns, items]
        else:
            entry[0] += ns
            entry[1] += items

    def __getstate__(self) -> tuple:
        return self.worker, self.weight, self.busy_ns, self.stages, self.bytes

    def __setstate__(self, state: tuple) -> None:
        self.worker, self.weight, self.busy_ns, self.stages, self.bytes = state


def current() -> BatchTimes | None:
    """The record of the batch this thread is loading, or None (statistics off, or outside a batch)."""
    return getattr(_local, "times", None)


def count_bytes(counter: str, n: int) -> None:
    """Count ``n`` bytes under ``counter`` (``"node_cache_hit"``, ``"download"``, ``"range_read"``): on the batch
    being loaded, else kept for this process's next batch."""
    times = getattr(_local, "times", None)
    if times is not None:
        times.bytes[counter] = times.bytes.get(counter, 0) + n
        return
    with _unclaimed_lock:
        _unclaimed[counter] = _unclaimed.get(counter, 0) + n


def claim_bytes() -> dict[str, int]:
    """The bytes counted outside any batch in this process so far (taken: counted once)."""
    if not _unclaimed:  # (none: no lock taken; bytes counted meanwhile are claimed next time)
        return {}
    with _unclaimed_lock:
        taken = dict(_unclaimed)
        _unclaimed.clear()
    return taken


class WorkerIndex:
    """A worker's initializer: remembers the worker's index on its thread, then runs ``init(index)`` if given."""

    def __init__(self, init: Callable[[int], None] | None) -> None:
        self.init = init

    def __call__(self, index: int) -> None:
        _local.worker = index
        if self.init is not None:
            self.init(index)


class Recorded:
    """``fn`` run on a pool's worker with jobs ``(weight, item)``, returning ``(BatchTimes | None, result)``: a job of
    weight 0 runs plain, another is timed and its record stands for ``weight`` batches.

    A ``fn`` whose ``records_stages`` attribute is true is called as ``fn(item, times)`` when timed and adds its
    stages' times itself (a fetch stage: ``dataset``, ``transform``, ``collate``, ``pin``).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.staged = bool(getattr(fn, "records_stages", False))

    def __call__(self, job: tuple[int, Any]) -> tuple[BatchTimes | None, Any]:
        weight, item = job
        if weight:
            return self.record(item, weight)
        result = self.fn(item)
        if not _unclaimed:
            return None, result
        times = BatchTimes(getattr(_local, "worker", MAIN), 0)  # bytes only: they go back with every batch
        times.bytes = claim_bytes()
        return times, result

    def record(self, item: Any, weight: int) -> tuple[BatchTimes, Any]:
        """``fn(item)`` timed: ``(its BatchTimes, its result)``."""
        times = _local.times = BatchTimes(getattr(_local, "worker", MAIN), weight)
        t0 = perf_counter_ns()
        try:
            result = self.fn(item, times) if self.staged else self.fn(item)
        finally:
            times.busy_ns = perf_counter_ns() - t0
            _local.times = None
        if _unclaimed:
            for counter, n in claim_bytes().items():
                times.bytes[counter] = times.bytes.get(counter, 0) + n
        return times, result
