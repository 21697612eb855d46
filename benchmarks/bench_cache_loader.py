"""The cache's torch loader (issue 3): throughput against dataset-rt, resume cost, and worker memory.

1. 20,000 x 4 KiB cache, batch 256, collated to a uint8 tensor: samples/s of ``to_torch_dataloader`` with 0 and
   2 loading workers, shuffled and sequential, against dataset-rt 0.4.8's ``to_torch_dataloader`` (0 workers).
2. Resume at 90% of a 1,000,000-sample epoch: time to the first batch, against a fresh start.
3. Memory: a 10,000,000-row metadata table, 4 loading workers: each worker's USS and PSS
   (/proc/<pid>/smaps_rollup) and the PSS of the mapped metadata snapshot, against one copy of it.

    python benchmarks/bench_cache_loader.py [--repeats 3] [--skip-memory]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median_time

import torch_drt as drt

N, SIZE, BATCH = 20_000, 4096, 256


class Source:
    def __init__(self, name, payloads, make):
        self.name, self.payloads, self.make = name, payloads, make

    def __iter__(self):
        for i, p in enumerate(self.payloads):
            yield self.make(p, {"label": i % 1000})


def to_array(sample):
    return np.frombuffer(sample.data, dtype=np.uint8)


def stack(items):
    return torch.from_numpy(np.stack(items))


def epoch(loader) -> int:
    return sum(b.shape[0] for b in loader)


def throughput(work: Path, payloads: list[bytes], repeats: int) -> dict[str, float]:
    rt = drt.DatasetRuntime(2)
    quiet = drt.WriterConfig(show_progress=False)
    ds = rt.from_cache_sources(
        Source("ours", payloads, drt.CacheInput),
        work / "ours",
        reader_config=drt.ReaderConfig(seed=0),
        writer_config=quiet,
    )
    out = {}
    for shuffle in (True, False):
        for workers in (0, 2):
            loader = ds.to_torch_dataloader(
                sample_transform_fn=to_array,
                collate_fn=stack,
                batch_size=BATCH,
                shuffle=shuffle,
                num_workers=workers,
                native_num_workers=1,
                multiprocessing_context="spawn",
            )
            key = f"drt_{'shuffled' if shuffle else 'sequential'}_{workers}"
            out[key] = N / median_time(lambda loader=loader: epoch(loader), repeats)
    try:
        import dataset_rt
    except ImportError as e:
        out["dataset_rt_error"] = str(e)
        return out
    rt2 = dataset_rt.DatasetRuntime(num_workers=2)
    res2 = rt2.from_cache_sources(
        [Source("theirs", payloads, dataset_rt.CacheInput)],
        work / "theirs",
        reader_config=dataset_rt.ReaderConfig(seed=0),
        writer_config=dataset_rt.WriterConfig(show_progress=False),
    )
    import logging

    logging.getLogger("dataset_rt").setLevel(logging.WARNING)
    for shuffle in (True, False):
        loader = res2.dataset.to_torch_dataloader(
            sample_transform_fn=to_array,
            collate_fn=stack,
            batch_size=BATCH,
            shuffle=shuffle,
            seed=1 if shuffle else "random",
            num_workers=0,
            native_num_workers=1,
            verbose=False,
        )
        key = f"dataset_rt_{'shuffled' if shuffle else 'sequential'}_0"
        out[key] = N / median_time(lambda loader=loader: epoch(loader), repeats)
    return out


def resume(ds) -> dict[str, float]:
    kwargs = dict(sample_transform_fn=to_array, collate_fn=stack, batch_size=BATCH, samples_per_epoch=1_000_000,
                  num_workers=0)
    loader = ds.to_torch_dataloader(**kwargs)
    it = iter(loader)
    for _ in range(int(0.9 * 1_000_000 / BATCH)):
        next(it)
    state = loader.state_dict()
    del it, loader
    t0 = time.perf_counter()
    fresh = ds.to_torch_dataloader(**kwargs)
    next(iter(fresh))
    fresh_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    resumed = ds.to_torch_dataloader(**kwargs)
    resumed.load_state_dict(state)
    next(iter(resumed))
    return {"fresh": fresh_s, "resumed": time.perf_counter() - t0}


def smaps(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) * 1024
    return out


def mapped_pss(pid: int, needle: str) -> int:
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:
            inside = line.rstrip().endswith(needle)
        elif inside and line.startswith("Pss:"):
            total += int(line.split()[1]) * 1024
    return total


def touch(sample):
    return len(sample.data)


def memory(work: Path, payloads: list[bytes]) -> dict[str, object]:
    import pyarrow as pa

    rt = drt.DatasetRuntime(2)
    ds = rt.from_cache_sources(
        Source("mem", payloads[:10_000], drt.CacheInput),
        work / "mem",
        reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )
    table = ds.get_metadata()
    rows = np.arange(10_000_000) % table.num_rows
    ds.update_metadata(table.take(pa.array(rows)))
    loader = ds.to_torch_dataloader(
        sample_transform_fn=touch,
        collate_fn=sum,
        batch_size=BATCH,
        num_workers=4,
        samples_per_epoch=200_000,
        multiprocessing_context="spawn",
    )
    it = iter(loader)
    for _ in range(100):
        next(it)
    snapshot = loader.snapshot_path
    size = os.path.getsize(snapshot)
    workers = loader.worker_pids()
    figures = {"snapshot_bytes": size, "workers": []}
    for pid in workers:
        s = smaps(pid)
        figures["workers"].append(
            {
                "pid": pid,
                "uss": s.get("Private_Clean", 0) + s.get("Private_Dirty", 0),
                "pss": s["Pss"],
                "snapshot_pss": mapped_pss(pid, os.path.basename(snapshot)),
            }
        )
    del it
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    results: dict = {}
    print(f"# cache loader benchmarks on {machine()}, median of {args.repeats}")
    rng = np.random.default_rng(0)
    payloads = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(N)]
    work = Path(tempfile.mkdtemp(prefix="bench_cache_loader_"))
    try:
        tp = throughput(work, payloads, args.repeats)
        results["throughput"] = tp
        print(f"\n## to_torch_dataloader: {N} x {SIZE} B, batch {BATCH}, uint8 tensor batches (samples/s)")
        for mode in ("shuffled", "sequential"):
            ours0, ours2 = tp[f"drt_{mode}_0"], tp[f"drt_{mode}_2"]
            line = (
                f"{mode:<10} torch_drt 0 workers {ours0:>10,.0f}   2 workers {ours2:>10,.0f} "
                f"({ours2 / ours0:.2f}x of 0)"
            )
            if f"dataset_rt_{mode}_0" in tp:
                theirs = tp[f"dataset_rt_{mode}_0"]
                line += f"   dataset-rt 0 workers {theirs:>9,.0f}   ratio {ours0 / theirs:.1f}x (target >= 10x)"
            print(line)
        if "dataset_rt_error" in tp:
            print(f"dataset-rt skipped: {tp['dataset_rt_error']}")

        rt = drt.DatasetRuntime(1)
        ds = rt.cached_dataset([work / "ours" / "ours"], reader_config=drt.ReaderConfig(seed=0))
        r = resume(ds)
        results["resume"] = r
        print("\n## resume at 90% of a 1,000,000-sample epoch (time to first batch)")
        print(
            f"fresh start {r['fresh'] * 1e3:.1f} ms, resumed {r['resumed'] * 1e3:.1f} ms, "
            f"ratio {r['resumed'] / r['fresh']:.2f} (target <= 2)"
        )

        if not args.skip_memory:
            m = memory(work, payloads)
            results["memory"] = m
            copy = m["snapshot_bytes"]
            print("\n## memory: 10,000,000-row metadata table, 4 loading workers (spawn)")
            print(f"metadata snapshot (one copy): {copy / 2**20:,.1f} MiB")
            for w in m["workers"]:
                print(
                    f"worker {w['pid']}: USS {w['uss'] / 2**20:8.1f} MiB  PSS {w['pss'] / 2**20:8.1f} MiB  "
                    f"snapshot PSS {w['snapshot_pss'] / 2**20:8.1f} MiB"
                )
            total = sum(w["snapshot_pss"] for w in m["workers"])
            print(
                f"workers' PSS attributable to the snapshot: {total / 2**20:,.1f} MiB = {total / copy:.2f} copies "
                "(target < 1.5)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
