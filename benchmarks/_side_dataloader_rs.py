"""Runs under the Python 3.13 side venv: dataloader-rs on the loader workloads; prints one JSON object."""

from __future__ import annotations

import json
import sys
import time

from _common import median_time as median  # stdlib-only helpers, importable under Python 3.13 too
from _ints_workload import drain, rs_loader


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    from dataloader_rs import PyDataloader, PyDataset

    class Sleepy(PyDataset):
        def __len__(self):
            return 1024

        def __getitem__(self, i):
            time.sleep(0.01)
            return i

    out = {}
    for workers in (0, 2):
        out[f"overhead_{workers}"] = median(drain(rs_loader(workers)), repeats)
    try:
        loader = PyDataloader(Sleepy(), batch_size=32, num_workers=2, item_concurrency=32, collate_fn=lambda b: b)
    except TypeError:  # dataloader-rs 0.2 calls it items_in_parallel
        loader = PyDataloader(Sleepy(), batch_size=32, num_workers=2, items_in_parallel=32, collate_fn=lambda b: b)
    out["io"] = median(drain(loader), repeats)
    if len(sys.argv) > 2:  # the fetch workload: base URL, item count, size
        from dataloader_rs import HttpDataset

        base, items, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        urls = [f"{base}/item/{i}?size={size}" for i in range(items)]

        def fetch():
            try:
                fresh = PyDataloader(HttpDataset(urls), batch_size=64, num_workers=2, item_concurrency=32)
            except TypeError:
                fresh = PyDataloader(HttpDataset(urls), batch_size=64, num_workers=2, items_in_parallel=32)
            return sum(len(b) for b in fresh)

        out = {"http": median(fetch, repeats)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
