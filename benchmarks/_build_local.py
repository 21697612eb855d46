"""The build benchmark's torch_drt row without Ray: ``torch_drt.build.build_cache_set(..., num_workers=N)`` in a
fresh process (run by bench_build.py, so that its worker processes are never forked from a Ray driver).

    python benchmarks/_build_local.py LIST_FILE OUT_ROOT PARTS WORKERS  ->  {"seconds": ..., "cpu": ..., ...}

``cpu`` is the CPU seconds of the build in this process and its worker processes (joined at its end). The rest is
the build's accounting, from each row's conversion as the workers ran it (its thread CPU and its start and end,
kept in shared arrays the forked workers inherit): ``driver_cpu`` (this process), ``convert_cpu`` (the conversion
in the workers: the rest of the workers' CPU is the writer's), and per worker ``start`` (build start to its first
row), ``between`` (wall time between its rows: part boundaries, the writer, waits for the CPU), ``tail`` (its last
row to the build's end: idle while another worker finishes) and ``rows``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from multiprocessing import get_context

from bench_build import ToInput

from torch_drt import WriterConfig
from torch_drt.build import build_cache_set, split_rows


class Accounted(ToInput):
    """``ToInput`` that records each row's conversion (thread CPU, wall start and end, pid) in shared arrays."""

    def __init__(self, n: int) -> None:
        super().__init__()
        ctx = get_context("fork")
        self.cpu, self.t0, self.t1 = (ctx.RawArray("d", n) for _ in range(3))
        self.pid = ctx.RawArray("q", n)

    def __call__(self, row: dict):
        i, t0, c0 = row["i"], time.time(), time.thread_time()
        sample = super().__call__(row)
        self.cpu[i], self.t0[i], self.t1[i], self.pid[i] = time.thread_time() - c0, t0, time.time(), os.getpid()
        return sample


def accounting(fn: Accounted, start: float, end: float) -> dict:
    """The build's conversion CPU and each worker's start, between-rows and tail wall time."""
    by_pid: dict[int, list[int]] = {}
    for i in range(len(fn.pid)):
        by_pid.setdefault(fn.pid[i], []).append(i)
    workers = []
    for rows in by_pid.values():
        rows.sort(key=lambda i: fn.t0[i])
        busy = sum(fn.t1[i] - fn.t0[i] for i in rows)
        span = fn.t1[rows[-1]] - fn.t0[rows[0]]
        workers.append({"rows": len(rows), "start": fn.t0[rows[0]] - start, "between": span - busy,
                        "tail": end - fn.t1[rows[-1]]})
    return {"convert_cpu": sum(fn.cpu), "workers": workers}


def print_accounting(a: dict, conversion: float) -> None:
    """Where the processes build's CPU and its workers' wall time went (its median round by seconds)."""
    workers_cpu = a["cpu"] - a["driver_cpu"]
    print(f"  processes build accounting (median round, {a['seconds']:.2f} s): {a['cpu']:.2f} s of CPU = driver "
          f"{a['driver_cpu']:.2f} + workers {workers_cpu:.2f} (converting {a['convert_cpu']:.2f}, writer and the rest "
          f"{workers_cpu - a['convert_cpu']:.2f}); converting is {a['convert_cpu'] / a['cpu']:.1%} of the build's CPU "
          f"(the same images converted in one process: {conversion:.2f} s)")
    for k, w in enumerate(a["workers"]):
        print(f"  worker {k}: {w['rows']} rows, first row {w['start']:.3f} s after the start, {w['between']:.3f} s "
              f"between rows (writer, part ends, waits for a CPU), idle tail {w['tail']:.3f} s")


def main() -> None:
    list_file, out, parts, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(list_file) as f:
        rows = [{"path": line, "i": i} for i, line in enumerate(f.read().splitlines())]
    fn = Accounted(len(rows))
    ToInput()(rows[0])  # import the conversion's modules, untimed (the workers inherit them)
    t0, c0 = time.time(), os.times()
    report = build_cache_set(split_rows(rows, fn, num_parts=parts), out, "local",
                             writer_config=WriterConfig(show_progress=False), num_workers=workers)
    t1, c1 = time.time(), os.times()
    assert report.ok, report.summary()
    cpu = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user", "children_system"))
    driver = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system"))
    print(json.dumps({"seconds": t1 - t0, "cpu": cpu, "driver_cpu": driver, **accounting(fn, t0, t1)}))


if __name__ == "__main__":
    main()
