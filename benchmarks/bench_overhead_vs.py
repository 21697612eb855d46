"""The loader's per-batch overhead against another source tree (issue 12: the per-item generator costs <= 5%).

The 100,000-ints overhead benchmark of bench_loader.py (batch 64, identity collate), 0 workers and 2 persistent
worker threads, in CPU time (``process_time``: the machine may be shared), minimum over ``--epochs`` epochs per
round. Each round runs one child interpreter per tree, alternating, so both see the same machine state; the
medians over rounds are printed with their ratio.

    python benchmarks/bench_overhead_vs.py --baseline /work/baseline [--rounds 5] [--epochs 30]
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


def measure(tree: Path, epochs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(epochs)], capture_output=True, text=True, env=env,
                          cwd=tree, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other tree (its root: torch_drt/ inside)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    ours: dict[str, list[float]] = {"0": [], "2": []}
    base: dict[str, list[float]] = {"0": [], "2": []}
    for _ in range(args.rounds):
        for tree, into in ((args.baseline, base), (ROOT, ours)):
            for workers, seconds in measure(tree, args.epochs).items():
                into[workers].append(seconds)
    print(f"# CPU ms per epoch (100,000 ints, batch 64), min of {args.epochs} epochs, median of {args.rounds} rounds")
    for workers in ("0", "2"):
        a, b = statistics.median(base[workers]), statistics.median(ours[workers])
        label = "0 workers" if workers == "0" else "2 threads"
        print(f"{label}: baseline {a * 1e3:.2f} ms, this tree {b * 1e3:.2f} ms, ratio {b / a:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
