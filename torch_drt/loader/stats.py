"""LoaderStats: where a loader's time went (``loader.stats()``), as a table, a flat dict and a one-line verdict.

Stages, by where they run:

- on the workers (the calling thread with ``num_workers=0``): ``dataset`` (``__getitem__``/``__getitems__``, a
  node's or cache's reads), ``transform``, ``collate``, ``pin``;
- in the calling thread: ``source`` (the sampler, a node or stream producing the next batch's plan),
  ``transport`` (unpacking a process worker's batch), ``device`` (the copy to ``device=``).

The caller's time is split into ``wait`` (inside ``next()``: waiting for data) and ``consumer`` (between ``next()``
calls: the training step). Their sum is the wall time the statistics cover.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from torch_drt._stage_clock import MAIN
from torch_drt.loader._stats_recorder import StatsRecorder

CONSUMER_BOUND_BELOW = 0.10  # the caller waited less than this share of the time: data loading is not the bottleneck
BUSY_WORKERS = 0.80  # workers busier than this are saturated: more workers help
PARENT_STAGES = ("source", "transport", "device")
_ADVICE = {
    "source": "the sampler, node or stream producing batches runs in the calling thread: make it cheaper",
    "transport": "unpacking process workers' batches is the cost: try worker_method='thread' or smaller batches",
    "device": "the copy to the device is the cost: set pin_memory=True",
}


@dataclasses.dataclass(frozen=True)
class StageStats:
    """One stage over all workers: batches and items through it, and the seconds spent in it."""

    name: str
    batches: int
    items: int
    busy_s: float


@dataclasses.dataclass(frozen=True)
class WorkerStats:
    """One worker (``-1``: the calling thread): batches loaded, seconds busy and idle, seconds per stage."""

    worker: int
    batches: int
    busy_s: float
    wait_s: float
    stages: dict[str, float]


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """A loader's statistics since it was built (kept across epochs, resumes and worker restarts).

    Attributes:
        num_workers: the loader's workers (0: batches are loaded in the calling thread).
        worker_method: ``"thread"`` or ``"process"``.
        batches: batches delivered to the caller.
        items: items in them.
        wall_s: ``wait_s + consumer_s``: the caller's time with this loader.
        wait_s: the caller's time inside ``next()`` (waiting for data; the device copy included).
        consumer_s: the caller's time between ``next()`` calls (its own work).
        startup_s: the waits for each iterator's first batch (workers starting, caches opening), part of ``wait_s``.
        every: one batch in this many is timed now (1 when batches take 2 ms or more; see ``StatsRecorder``).
        wait_p50_ms, wait_p95_ms: the median and 95th percentile wait per batch (the last 65,536 batches).
        stages: stage name -> ``StageStats`` (see the module docstring).
        workers: worker index -> ``WorkerStats`` (``-1``: the calling thread's loads and stages).
        bytes: counter -> bytes read (``node_cache_hit``, ``download``, ``range_read``).
        in_flight_mean, ready_mean: batches in flight, and already loaded, at a delivery from the workers.
    """

    num_workers: int
    worker_method: str
    batches: int
    items: int
    wall_s: float
    wait_s: float
    consumer_s: float
    startup_s: float
    every: int
    wait_p50_ms: float
    wait_p95_ms: float
    stages: dict[str, StageStats]
    workers: dict[int, WorkerStats]
    bytes: dict[str, int]
    in_flight_mean: float
    ready_mean: float

    @classmethod
    def of(cls, recorder: StatsRecorder, num_workers: int, worker_method: str) -> LoaderStats:
        """The statistics a ``StatsRecorder`` holds now (the running iterator's batches counted)."""
        recorder.flush()
        wall_ns = recorder.wall_ns
        totals: dict[str, list[int]] = {}
        for worker_stages in recorder.stages.values():
            for name, (ns, items, batches) in worker_stages.items():
                total = totals.setdefault(name, [0, 0, 0])
                total[0] += ns
                total[1] += items
                total[2] += batches
        workers = {}
        for worker in sorted(set(recorder.busy) | set(recorder.stages)):
            busy_ns, batches = recorder.busy.get(worker, (0, 0))
            stages = {name: ns / 1e9 for name, (ns, _, _) in recorder.stages.get(worker, {}).items()}
            if worker == MAIN:  # the calling thread's busy time is its loads and its own stages
                busy_ns += sum(ns for name, (ns, _, _) in recorder.stages.get(worker, {}).items()
                               if name in PARENT_STAGES)
            workers[worker] = WorkerStats(worker, batches, busy_ns / 1e9, max(0, wall_ns - busy_ns) / 1e9, stages)
        waits = sorted(recorder.waits)
        deliveries = recorder.deliveries or 1
        return cls(
            num_workers=num_workers,
            worker_method=worker_method,
            batches=recorder.batches,
            items=recorder.items,
            wall_s=wall_ns / 1e9,
            wait_s=recorder.wait_ns / 1e9,
            consumer_s=max(0, wall_ns - recorder.wait_ns) / 1e9,
            startup_s=recorder.startup_ns / 1e9,
            every=recorder.every,
            wait_p50_ms=_percentile(waits, 0.50) / 1e6,
            wait_p95_ms=_percentile(waits, 0.95) / 1e6,
            stages={name: StageStats(name, b, i, ns / 1e9) for name, (ns, i, b) in totals.items()},
            workers=workers,
            bytes=dict(recorder.bytes),
            in_flight_mean=recorder.in_flight / deliveries,
            ready_mean=recorder.ready / deliveries,
        )

    @property
    def wait_share(self) -> float:
        """The share of the caller's time spent waiting for data, each iterator's first batch left out (start-up)."""
        wall, wait = self.wall_s - self.startup_s, self.wait_s - self.startup_s
        return min(1.0, max(0.0, wait / wall)) if wall > 0 else 0.0

    @property
    def workers_busy(self) -> float:
        """The workers' busy share of the wall time (the calling thread's loads with ``num_workers=0``)."""
        if self.wall_s <= 0:
            return 0.0
        if self.num_workers == 0:
            main = self.workers.get(MAIN)
            return min(1.0, (main.busy_s if main else 0.0) / self.wall_s)
        busy = sum(w.busy_s for index, w in self.workers.items() if index != MAIN)
        return min(1.0, busy / (self.wall_s * self.num_workers))

    def dominant_stage(self) -> tuple[str, float] | None:
        """The stage with the most time, and its share of all stages' time (None before any)."""
        total = sum(s.busy_s for s in self.stages.values())
        if not self.stages or total <= 0:
            return None
        top = max(self.stages.values(), key=lambda s: s.busy_s)
        return top.name, top.busy_s / total

    def verdict(self) -> str:
        """One line to act on: whether data loading bounds the loop, which stage dominates, what to change."""
        if self.batches == 0:
            return "no batches yet: iterate the loader first"
        waited = self.wait_share
        if waited < CONSUMER_BOUND_BELOW:
            return (f"consumer-bound: the loop waited for data {waited:.0%} of the time — data loading is not your "
                    "bottleneck")
        top = self.dominant_stage()
        stage, share = top if top is not None else ("dataset", 1.0)
        head = f"input-bound: the loop waited for data {waited:.0%} of the time; {stage} {share:.0%} of loading time"
        if stage in PARENT_STAGES:
            return f"{head}: {_ADVICE[stage]}"
        if self.num_workers == 0:
            return f"{head}, loaded in the calling thread: set num_workers > 0"
        busy = self.workers_busy
        workers = f"{self.num_workers} worker{'s' if self.num_workers > 1 else ''} busy {busy:.0%}"
        if busy >= BUSY_WORKERS:
            return f"{head}; {workers}: raise num_workers"
        knob = "prefetch_depth" if self.worker_method == "thread" else "prefetch_factor"  # (each's default)
        return f"{head}; {workers}: raise {knob} (more batches in flight)"

    def to_dict(self) -> dict[str, float]:
        """Flat numbers with ``/``-separated keys (``"stage/dataset/busy_s"``), for TensorBoard and loggers."""
        out: dict[str, float] = {
            "batches": self.batches, "items": self.items, "wall_s": self.wall_s, "wait_s": self.wait_s,
            "consumer_s": self.consumer_s, "startup_s": self.startup_s, "wait_share": self.wait_share,
            "wait_p50_ms": self.wait_p50_ms, "wait_p95_ms": self.wait_p95_ms, "workers_busy": self.workers_busy,
            "queue/in_flight_mean": self.in_flight_mean, "queue/ready_mean": self.ready_mean,
        }
        for s in self.stages.values():
            out |= {f"stage/{s.name}/busy_s": s.busy_s, f"stage/{s.name}/items": s.items,
                    f"stage/{s.name}/batches": s.batches}
        for w in self.workers.values():
            name = "main" if w.worker == MAIN else str(w.worker)
            out |= {f"worker/{name}/busy_s": w.busy_s, f"worker/{name}/wait_s": w.wait_s,
                    f"worker/{name}/batches": w.batches}
            out |= {f"worker/{name}/stage/{stage}_s": seconds for stage, seconds in w.stages.items()}
        out |= {f"bytes/{counter}": n for counter, n in self.bytes.items()}
        return out

    def __str__(self) -> str:
        total = sum(s.busy_s for s in self.stages.values()) or 1.0
        lines = [
            f"{self.batches} batches, {self.items} items in {self.wall_s:.3f}s; the loop waited {self.wait_s:.3f}s, "
            f"{self.startup_s:.3f}s of it for first batches ({self.wait_share:.0%} after them; per batch p50 "
            f"{self.wait_p50_ms:.2f} ms, p95 {self.wait_p95_ms:.2f} ms)",
            f"{'stage':<10} {'batches':>8} {'items':>9} {'busy s':>9} {'share':>6}",
        ]
        for s in sorted(self.stages.values(), key=lambda s: -s.busy_s):
            lines.append(f"{s.name:<10} {s.batches:>8} {s.items:>9} {s.busy_s:>9.3f} {s.busy_s / total:>6.0%}")
        lines.append(f"{'worker':<10} {'batches':>8} {'busy s':>9} {'idle s':>9} {'busy':>6}")
        for w in self.workers.values():
            name = "main" if w.worker == MAIN else str(w.worker)
            busy = w.busy_s / self.wall_s if self.wall_s > 0 else 0.0
            lines.append(f"{name:<10} {w.batches:>8} {w.busy_s:>9.3f} {w.wait_s:>9.3f} {min(busy, 1.0):>6.0%}")
        if self.bytes:
            lines.append("bytes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.bytes.items())))
        lines.append(self.verdict())
        return "\n".join(lines)


def _percentile(sorted_values: Any, q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))])
