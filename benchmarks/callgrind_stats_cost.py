"""What the loader's statistics cost in instructions and L1 instruction-cache misses (issue 28), under callgrind.

bench_stats_cost.py's loader (100,000 ints, batch 64, identity collate; 0 workers, or ``--workers 2`` persistent
threads, whose adaptive mapper maps these cheap batches in the calling thread), statistics on and off, each in its
own interpreter under ``valgrind --tool=callgrind --cache-sim=yes``: the imports run uninstrumented (fast), the
loader is built and warmed up (the simulated caches too), then ``--epochs`` whole epochs (``iter()``, the first batch
and the rest) are collected (``--toggle-collect`` on the C function that runs them, ``functools.reduce``). Printed:
per epoch and per batch, instructions (Ir) and simulated L1 instruction-cache misses (I1mr), and statistics on / off
- 1.

Counts are exact and do not depend on the machine's load (a check that holds where wall-clock A/Bs are noise). The
statistics' sampling period (``every``) follows the batches' measured speed, which callgrind slows ~50x: it is
forced instead to ``--every`` (default ``StatsRecorder.MAX_EVERY``, the 100k-ints loader's natively), the countdown
carried into the collected epochs set to that too (at the default, no timed batch falls in them: the untimed path,
the per-epoch statistics work and the first call's start-up timing are measured). So is the threads' mapper's mode:
callgrind's slow batches would send them to the workers, so its inline threshold is lifted (the mapper inline, as
natively; the idle workers run no instructions). The hash seed is fixed.

    python benchmarks/callgrind_stats_cost.py [--workers 0] [--epochs 3] [--every 16384] [--keep DIR]

(``--keep DIR``: the two callgrind outputs are kept there, ``on`` and ``off``, for ``callgrind_annotate``.)
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _ints_workload import BATCH, ITEMS
from _stats_workload import make_loader

from torch_drt.loader._stats_recorder import StatsRecorder

EVENTS = ("Ir", "I1mr")


def child(stats: bool, epochs: int, every: int, workers: int) -> None:
    """Build the loader, force its sampling period (and its mapper inline), warm up, then run ``epochs`` epochs inside
    ``reduce``."""
    control = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())], stdout=subprocess.DEVNULL)
    while control.poll() is None:  # (running: valgrind takes the command between blocks of this loop)
        pass
    loader = make_loader(workers, stats)  # (one warm-up epoch)
    mapper = loader._mode.mapper
    mapper._cost.below_s = math.inf  # (threads: inline, whatever callgrind's slowdown)
    if loader._stats is not None:
        recorder = loader._stats
        recorder.EXACT_NS = recorder.BUDGET_NS = 1 << 62  # `every` is not recomputed from callgrind's slow batches
        recorder.MAX_EVERY = every
        recorder.every = recorder.left = every
    sum(1 for _ in loader)  # another warm-up epoch (the simulated caches warm, the countdown set)
    if loader._stats is not None:
        loader._stats.every = loader._stats.left = every
    if not mapper._inline:
        sys.exit("the mapper is not inline")
    gc.collect()  # the collector's counts start from zero: the same collections in every run

    def run(_: object, __: object) -> int:
        for _ in range(epochs):
            for _ in loader:
                pass
        return 0
    functools.reduce(run, range(2))  # collected: the one call of `run`


def measure(stats: bool, epochs: int, every: int, workers: int, out: Path) -> dict[str, int]:
    """One interpreter under callgrind: the collected events' totals."""
    cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no", "--collect-atstart=no",
           "--toggle-collect=functools_reduce", f"--callgrind-out-file={out}",
           sys.executable, __file__, "--child", "on" if stats else "off", "--epochs", str(epochs),
           "--every", str(every), "--workers", str(workers)]
    env = os.environ | {"PYTHONHASHSEED": "0"}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = out.read_text()
    names = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    totals = re.search(r"^(?:summary|totals): (.+)$", text, re.M).group(1).split()
    counts = dict(zip(names, map(int, totals)))
    return {name: counts[name] for name in EVENTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs collected per arm")
    parser.add_argument("--every", type=int, default=StatsRecorder.MAX_EVERY, help="the statistics' period")
    parser.add_argument("--workers", type=int, choices=(0, 2), default=0, help="0, or 2 persistent threads")
    parser.add_argument("--keep", type=Path, default=None, help="keep the callgrind outputs in this directory")
    parser.add_argument("--child", choices=("on", "off"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child == "on", args.epochs, args.every, args.workers)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    batches = -(-ITEMS // BATCH) * args.epochs
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) if args.keep is None else args.keep
        where.mkdir(parents=True, exist_ok=True)
        arms = {name: measure(name == "on", args.epochs, args.every, args.workers, where / name)
                for name in ("off", "on")}
    label = "0 workers" if args.workers == 0 else f"{args.workers} threads (mapper inline)"
    print(f"# callgrind, {label}, {ITEMS:,} ints, batch {BATCH}: {args.epochs} epochs collected per arm, "
          f"statistics period {args.every}")
    for name, counts in arms.items():
        print(f"statistics {name:3}: " + ", ".join(
            f"{event} {counts[event] / args.epochs:,.0f} per epoch ({counts[event] / batches:,.1f} per batch)"
            for event in EVENTS))
    print("on / off - 1: " + ", ".join(
        f"{event} {arms['on'][event] / arms['off'][event] - 1:+.2%} "
        f"({(arms['on'][event] - arms['off'][event]) / batches:+,.1f} per batch)" for event in EVENTS))


if __name__ == "__main__":
    main()
