"""Time to the first batch with 2 worker processes (issue 21): torch_drt's cache loader against torch's DataLoader.

The same 20,000 x 4 KiB samples, batch 256, collated to a uint8 tensor, 2 worker processes with the platform's
default start method on both sides: torch's ``DataLoader`` over a map-style dataset of the cache's samples
(row i read with ``CachedDataset.read_rows``), torch_drt's ``to_torch_dataloader`` (shuffled: every row once per
epoch). A new loader each time; ``next(iter(loader))`` timed; runs interleaved, medians. Also
``torch_drt.StatefulDataLoader`` with its process default over the same dataset.

    python benchmarks/bench_first_batch.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

import torch_drt as drt

N, SIZE, BATCH = 20_000, 4096, 256


class Source:
    name = "first"

    def __iter__(self):
        for i in range(N):
            yield drt.CacheInput(bytes([i % 256]) * SIZE, {"label": i % 1000})


class Arrays(torch.utils.data.Dataset):
    """The cache's samples as arrays, for torch's DataLoader (the same work as the cache loader's transform)."""

    def __init__(self, ds) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.frombuffer(self.ds.read_rows(np.array([i])).data[0], dtype=np.uint8)


def to_array(sample) -> np.ndarray:
    return np.frombuffer(sample.data, dtype=np.uint8)


def stack(items) -> torch.Tensor:
    return torch.from_numpy(np.stack(items))


def first_batch(make) -> float:
    loader = make()
    t0 = time.perf_counter()
    next(iter(loader))
    took = time.perf_counter() - t0
    del loader
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_first_") as tmp:
        (res,) = drt.DatasetRuntime(1).write_cache(Source(), tmp, writer_config=drt.WriterConfig(show_progress=False))
        ds = drt.DatasetRuntime(1).cached_dataset(res.path, reader_config=drt.ReaderConfig(seed=0))
        makers = {
            "torch DataLoader, 2 processes": lambda: DataLoader(Arrays(ds), batch_size=BATCH, shuffle=True,
                                                                num_workers=2, collate_fn=stack),
            "torch_drt cache loader, 2 processes": lambda: ds.to_torch_dataloader(
                sample_transform_fn=to_array, collate_fn=stack, batch_size=BATCH, shuffle=True, num_workers=2),
            "torch_drt StatefulDataLoader, 2 processes": lambda: drt.StatefulDataLoader(
                Arrays(ds), batch_size=BATCH, shuffle=True, seed=0, num_workers=2, collate_fn=stack),
        }
        times: dict[str, list[float]] = {name: [] for name in makers}
        for make in makers.values():  # warm-up: page cache, imports
            first_batch(make)
        for _ in range(args.repeats):
            for name, make in makers.items():
                times[name].append(first_batch(make))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["torch DataLoader, 2 processes"]
    print(f"# time to the first batch on {machine()}, {N:,} x {SIZE} B, batch {BATCH}, median of {args.repeats}")
    for name, value in medians.items():
        print(f"{name:<45} {value * 1000:8.1f} ms  ({value / base:.2f}x torch's; target <= 1.2x)")


if __name__ == "__main__":
    main()
