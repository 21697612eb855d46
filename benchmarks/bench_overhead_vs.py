"""The loader's per-batch overhead against another source tree (issue 12: the per-item generator costs <= 5%).

The 100,000-ints overhead benchmark of bench_loader.py (batch 64, identity collate), 0 workers and 2 persistent
worker threads, in CPU time (``process_time``: the machine may be shared), minimum over ``--epochs`` epochs per
round. Each round runs one child interpreter per tree, alternating, so both see the same machine state; the
medians over rounds are printed with their ratio.

    python benchmarks/bench_overhead_vs.py --baseline /work/baseline [--rounds 5] [--epochs 30]

``--stats`` compares this tree with itself instead: the loader's statistics off (``TORCH_DRT_STATS=0``, the
baseline) against on (the default), interleaved the same way. On a shared machine its figure moves by tens of
percent from run to run: issue 28's goal (statistics cost at most 1%) is measured by bench_stats_cost.py.

    python benchmarks/bench_overhead_vs.py --stats [--rounds 9] [--epochs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from torch_drt import StatefulDataLoader

class Ints:
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return i

def identity(batch):
    return batch

epochs = int(sys.argv[1])
out = {}
for workers in (0, 2):
    kwargs = {"num_workers": workers, "persistent_workers": True, "worker_method": "thread"} if workers else {}
    loader = StatefulDataLoader(Ints(), batch_size=64, collate_fn=identity, **kwargs)
    sum(1 for _ in loader)  # warm up: workers started, code paths hot
    best = float("inf")
    for _ in range(epochs):
        t0 = time.process_time()
        sum(1 for _ in loader)
        best = min(best, time.process_time() - t0)
    out[workers] = best
print(json.dumps(out))
"""


def measure(tree: Path, epochs: int, stats: str | None = None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if stats is not None:
        env["TORCH_DRT_STATS"] = stats
    proc = subprocess.run([sys.executable, "-c", CHILD, str(epochs)], capture_output=True, text=True, env=env,
                          cwd=tree, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="the other tree (its root: torch_drt/ inside)")
    parser.add_argument("--stats", action="store_true", help="statistics off (baseline) against on, this tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    if (args.baseline is None) == (not args.stats):
        parser.error("give --baseline TREE or --stats")
    runs = ((ROOT, "0"), (ROOT, "1")) if args.stats else ((args.baseline, None), (ROOT, None))
    ours: dict[str, list[float]] = {"0": [], "2": []}
    base: dict[str, list[float]] = {"0": [], "2": []}
    for _ in range(args.rounds):
        for (tree, stats), into in zip(runs, (base, ours), strict=True):
            for workers, seconds in measure(tree, args.epochs, stats).items():
                into[workers].append(seconds)
    print(f"# CPU ms per epoch (100,000 ints, batch 64), min of {args.epochs} epochs, median of {args.rounds} rounds")
    for workers in ("0", "2"):
        a, b = statistics.median(base[workers]), statistics.median(ours[workers])
        label = "0 workers" if workers == "0" else "2 threads"
        names, target = (("stats off", "stats on"), 1.01) if args.stats else (("baseline", "this tree"), 1.05)
        print(f"{label}: {names[0]} {a * 1e3:.2f} ms, {names[1]} {b * 1e3:.2f} ms, ratio {b / a:.3f} "
              f"(target <= {target})")


if __name__ == "__main__":
    main()
