"""The build benchmark's rows without Ray, each in a fresh process (run by bench_build.py, so that no process is
ever forked from a Ray driver), its worker processes forked from it after the same warm-up (the conversion's and
the cache writer's modules imported):

    python benchmarks/_build_local.py build LIST_FILE OUT_ROOT PARTS WORKERS  ->  {"seconds": ..., "cpu": ..., ...}
    python benchmarks/_build_local.py ideal LIST_FILE IMAGES WORKERS  ->  {"seconds": ..., "cpu": ...}
    python benchmarks/_build_local.py bare LIST_FILE WORKERS  ->  {"seconds": ..., "cpu": ...}

``build``: ``torch_drt.build.build_cache_set(..., num_workers=WORKERS)``. ``ideal``: the conversion (``ToInput``)
in one forked process, one image after another, over IMAGES of the list spread evenly (all of them up to that
count); its seconds scaled to the whole list and divided among WORKERS (the ideal build), its CPU scaled to the
whole list. ``bare``: WORKERS forked processes each converting a contiguous share of the list, nothing written and
no torch_drt process pool (the machine's own scaling: the ideal's gap to it is not torch_drt's).

``cpu`` is the CPU seconds of the build in this process and its worker processes (joined at its end). The rest is
the build's accounting, from each row's conversion as the workers ran it (its thread CPU and its start and end,
kept in shared arrays the forked workers inherit): ``driver_cpu`` (this process), ``convert_cpu`` (the conversion
in the workers: the rest of the workers' CPU is the writer's), and per worker ``start`` (build start to its first
row), ``between`` (wall time between its rows: part boundaries, the writer, waits for the CPU), ``tail`` (its last
row to the build's end: idle while another worker finishes) and ``rows``; ``ahead``: the rows converted on a thread
of their own (a worker's next part, converted while its previous part ended); ``helped``: the rows converted by
another worker than their part's writer (the build's tail shared, ``torch_drt/build/_tail_help.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
from multiprocessing import get_context

from bench_build import ToInput

from torch_drt import WriterConfig
from torch_drt.build import build_cache_set, split_rows
from torch_drt.build.plan import part_bounds
from torch_drt.cache.writer import warm_up


class Accounted(ToInput):
    """``ToInput`` that records each row's conversion (thread CPU, wall start and end, pid) in shared arrays."""

    def __init__(self, n: int) -> None:
        super().__init__()
        ctx = get_context("fork")
        self.cpu, self.t0, self.t1 = (ctx.RawArray("d", n) for _ in range(3))
        self.pid = ctx.RawArray("q", n)
        self.ahead = ctx.RawArray("b", n)  # converted on a thread of its own: its part's next-part prefetch

    def __call__(self, row: dict):
        i, t0, c0 = row["i"], time.time(), time.thread_time()
        sample = super().__call__(row)
        self.cpu[i], self.t0[i], self.t1[i], self.pid[i] = time.thread_time() - c0, t0, time.time(), os.getpid()
        self.ahead[i] = threading.current_thread() is not threading.main_thread()
        return sample


def accounting(fn: Accounted, start: float, end: float, bounds: list[tuple[int, int]]) -> dict:
    """The build's conversion CPU, each worker's start, between-rows and tail wall time, and the rows converted by
    another worker than their part's writer (whose first row a part's writer always converts)."""
    helped = sum(fn.pid[i] != fn.pid[a] for a, b in bounds for i in range(a, b))
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
    return {"convert_cpu": sum(fn.cpu), "workers": workers, "ahead": sum(fn.ahead), "helped": helped}


def print_accounting(a: dict, conversion: float) -> None:
    """Where the processes build's CPU and its workers' wall time went (its median round by seconds)."""
    workers_cpu = a["cpu"] - a["driver_cpu"]
    print(f"  processes build accounting (median round, {a['seconds']:.2f} s): {a['cpu']:.2f} s of CPU = driver "
          f"{a['driver_cpu']:.2f} + workers {workers_cpu:.2f} (converting {a['convert_cpu']:.2f}, writer and the rest "
          f"{workers_cpu - a['convert_cpu']:.2f}); converting is {a['convert_cpu'] / a['cpu']:.1%} of the build's CPU "
          f"(the same images converted in one process: {conversion:.2f} s); {a.get('ahead', 0)} rows converted ahead, "
          f"while the worker's previous part ended; {a.get('helped', 0)} rows of a part converted by another worker "
          "than its writer (the build's tail shared)")
    for k, w in enumerate(a["workers"]):
        print(f"  worker {k}: {w['rows']} rows, first row {w['start']:.3f} s after the start, {w['between']:.3f} s "
              f"between rows (writer, part ends, waits for a CPU), idle tail {w['tail']:.3f} s")


def _convert_all(rows: list[dict], out) -> None:
    """Convert ``rows`` one after another; their seconds and CPU seconds into ``out`` (a forked child's)."""
    fn = ToInput()
    t0, c0 = time.perf_counter(), time.process_time()
    for row in rows:
        fn(row)
    out[0], out[1] = time.perf_counter() - t0, time.process_time() - c0


def forked(shares: list[list[dict]]) -> tuple[float, float, list]:
    """Convert each share in a process of its own, forked now; the wall seconds from the forks to the last join,
    the children's CPU seconds and each child's (seconds, CPU seconds)."""
    ctx = get_context("fork")
    outs = [ctx.RawArray("d", 2) for _ in shares]
    t0, c0 = time.perf_counter(), os.times()
    procs = [ctx.Process(target=_convert_all, args=(share, out)) for share, out in zip(shares, outs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"a conversion process exited with {p.exitcode}"
    seconds, c1 = time.perf_counter() - t0, os.times()
    return seconds, c1.children_user + c1.children_system - c0.children_user - c0.children_system, outs


def _reaped(limit_s: float = 30.0) -> None:
    """Wait until the build's worker processes are reaped (a closed pool ends them in the background), so that
    their CPU is in ``os.times()``'s children fields."""
    deadline = time.time() + limit_s
    while multiprocessing.active_children() and time.time() < deadline:
        time.sleep(0.005)


def main() -> None:
    mode, list_file = sys.argv[1], sys.argv[2]
    with open(list_file) as f:
        rows = [{"path": line, "i": i} for i, line in enumerate(f.read().splitlines())]
    ToInput()(rows[0])  # import the conversion's modules, untimed (the workers inherit them)
    warm_up()  # the writer's first-use imports, as build_cache_set does before it forks its workers
    if mode == "ideal":
        n, workers = int(sys.argv[3]), int(sys.argv[4])
        step = max(1, -(-len(rows) // max(1, n)))
        _, _, (out,) = forked([rows[::step]])
        scale = len(rows) / len(rows[::step])
        print(json.dumps({"seconds": out[0] * scale / workers, "cpu": out[1] * scale}))
        return
    if mode == "bare":
        workers = int(sys.argv[3])
        cuts = [len(rows) * k // workers for k in range(workers + 1)]
        seconds, cpu, _ = forked([rows[cuts[k] : cuts[k + 1]] for k in range(workers)])
        print(json.dumps({"seconds": seconds, "cpu": cpu}))
        return
    out, parts, workers = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    fn = Accounted(len(rows))
    t0, c0 = time.time(), os.times()
    report = build_cache_set(split_rows(rows, fn, num_parts=parts), out, "local",
                             writer_config=WriterConfig(show_progress=False), num_workers=workers)
    t1 = time.time()
    _reaped()
    c1 = os.times()
    assert report.ok, report.summary()
    cpu = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user", "children_system"))
    driver = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system"))
    bounds = part_bounds(len(rows), num_parts=parts)
    print(json.dumps({"seconds": t1 - t0, "cpu": cpu, "driver_cpu": driver, **accounting(fn, t0, t1, bounds)}))


if __name__ == "__main__":
    main()
