"""Autotune (issue 28): ``num_workers="auto", prefetch_depth="auto"`` against a grid search of fixed settings.

Three workloads, each a map-style dataset read by ``torch_drt.StatefulDataLoader`` (shuffled, a fresh loader per
run, a loop that does nothing with the batches, so the loader is the bottleneck):

- ``cpu``: CPU-bound decode (zlib-compressed payloads inflated and summed with numpy), process workers (fork);
- ``http``: I/O-bound ``HttpDataset`` items from a local aiohttp server (its own process) that waits ``--delay``
  per request, thread workers;
- ``remote``: rows of a cache on moto's S3 server (its own process) read through ``read_rows`` with a node cache,
  thread workers;
- ``cache``: the same cache read by its own torch loader (``to_torch_dataloader``, loading processes forked, a
  node cache of its own), ``num_workers="tune"`` against the grid of ``num_workers`` x ``prefetch_factor``.

For each fixed setting of the grid (``--workers`` x ``--depths``) and for auto: the steady throughput, measured over
the batches after the first 5% of the epoch (auto must have settled by then), and the peak memory of the process
and its workers above what it held before the loader (sampled every 20 ms), against ``--cap``. Prints per workload
auto's throughput as a share of the best fixed setting's (goal >= 90%), the batch at which it settled (goal: within
the first 5%), the setting it chose, and its peak memory against the cap.

    python benchmarks/bench_autotune.py [--workloads cpu,http,remote,cache] [--batches 2000] [--cap BYTES] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

import torch_drt as drt

BATCH = 16


class Decode:
    """CPU-bound items: a zlib-compressed 256 KiB payload, inflated and reduced per item."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.blob = zlib.compress(np.random.default_rng(0).integers(0, 4, 1 << 18, dtype=np.uint8).tobytes(), 6)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        raw = np.frombuffer(zlib.decompress(self.blob), dtype=np.uint8)
        return torch.from_numpy(np.bincount(raw[i % 7:], minlength=4).astype(np.int64))


class CacheRows:
    """A cache's rows by index, one ``read_rows`` per batch (``__getitems__``)."""

    def __init__(self, dataset: drt.CachedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset.active)

    def __getitem__(self, i: int) -> bytes:
        return self.dataset.read_rows(np.array([i])).data[0]

    def __getitems__(self, indices: list[int]) -> list[bytes]:
        return self.dataset.read_rows(np.asarray(indices)).data


def as_list(items):
    return list(items)


def proportional_bytes(pid: int) -> int:
    """A process's proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``; 0 unknown): a page shared by n
    processes counts 1/n in each, so the sum over a process and its forked workers is the memory they hold. Their
    private memory does not add up: pages a fork shares are private to neither, and the process's own falls below
    what it held before its workers existed."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, ValueError, IndexError):
        return 0


class PeakMemory:
    """The peak of the memory of the process and its workers (``proportional_bytes``) above what the process held
    before, sampled at most ``SHARE`` of one CPU's time: every 20 ms, or ``(1 - SHARE) / SHARE`` times a sample's
    own time after it when that is longer. A ``Pss`` costs the kernel a walk of the process's pages, 20-70 ms of
    CPU for a process that imported torch: sampled every 20 ms, the process and 4 workers kept one of the machine's
    CPUs busy, more with more workers, which slowed the settings with many workers most (``samples``: how many)."""

    SHARE = 0.05

    def __init__(self) -> None:
        gc.collect()  # an earlier run's loader freed later would lower the process below its baseline
        self.base, self.peak, self.pids = proportional_bytes(os.getpid()), 0, lambda: []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        pause = 0.02
        while not self._stop.wait(pause):
            t0 = time.perf_counter()
            self._sample()
            pause = max(0.02, (time.perf_counter() - t0) * (1 - self.SHARE) / self.SHARE)

    def _sample(self) -> None:
        now = proportional_bytes(os.getpid()) + sum(map(proportional_bytes, self.pids()))
        self.peak, self.samples = max(self.peak, now - self.base), self.samples + 1

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # the loader's workers still run: its memory at the end counts too


def run(dataset, batches: int, **kwargs) -> dict:
    """One epoch of ``batches``: steady throughput after its first 5%, where auto settled, the peak memory."""
    if isinstance(dataset, drt.CachedDataset):  # the cache's own loader: "tune", and prefetch_factor for depth
        if "prefetch_depth" in kwargs:
            kwargs["prefetch_factor"] = kwargs.pop("prefetch_depth")
        if kwargs.get("num_workers") == "auto":
            kwargs["num_workers"] = "tune"
            del kwargs["prefetch_factor"]
        loader = dataset.to_torch_dataloader(batch_size=BATCH, shuffle=True, seed=0, collate_fn=as_list, **kwargs)
    else:
        loader = drt.StatefulDataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0, collate_fn=as_list,
                                        **kwargs)
    tuned = loader._autotune is not None
    skip, settled, n = max(1, batches // 20), None, 0
    with PeakMemory() as memory:
        memory.pids = loader._mode.mapper.worker_pids
        t_skip = None
        for n, _ in enumerate(loader, 1):
            if tuned and settled is None and loader._autotune.done:
                settled = n
            if n == skip:
                t_skip = time.perf_counter()
            if n == batches:
                break
        steady = (n - skip) / (time.perf_counter() - t_skip)
    figures = {"throughput": steady, "peak_bytes": memory.peak, "memory_samples": memory.samples}
    if tuned:
        figures |= {"settled_at": settled, "chosen": [loader.num_workers, loader.prefetch_depth]}
    loader.close()
    return figures


def grid(dataset, batches: int, cap: int, workers: list[int], depths: list[int], **kwargs) -> dict:
    fixed = {}
    for w in workers:
        for d in depths:
            fixed[f"{w}x{d}"] = run(dataset, batches, num_workers=w, prefetch_depth=d, **kwargs)
            print(f"{w}x{d}: {fixed[f'{w}x{d}']}", file=sys.stderr, flush=True)  # kept if a later run is cut short
    auto = run(dataset, batches, num_workers="auto", prefetch_depth="auto", autotune_memory_cap=cap, **kwargs)
    print(f"auto: {auto}", file=sys.stderr, flush=True)
    best = max(fixed, key=lambda k: fixed[k]["throughput"])
    return {"fixed": fixed, "auto": auto, "best": best,
            "share": auto["throughput"] / fixed[best]["throughput"], "within_5pct": (auto["settled_at"] or batches)
            <= max(1, batches // 20)}


def http_dataset(n: int, delay: float, stack: list) -> drt.HttpDataset:
    import multiprocessing

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from http_server import serve_forever

    port = Path(tempfile.mkdtemp()) / "port"
    server = multiprocessing.get_context("spawn").Process(target=serve_forever, args=(str(port), delay), daemon=True)
    server.start()
    stack.append(server.terminate)
    while not port.exists() or not port.read_text():
        time.sleep(0.05)
    return drt.HttpDataset([f"http://127.0.0.1:{port.read_text()}/item/{i}?size=16384" for i in range(n)])


def remote_dataset(n: int, work: Path, stack: list) -> drt.CachedDataset:
    from _s3 import options, start_s3
    from bench_remote import Source

    work.mkdir(parents=True, exist_ok=True)  # the servers write their ports here
    servers = start_s3(work, 0.005, "bench")
    stack.append(servers.stop)
    storage = options(servers.proxy)
    writer = drt.WriterConfig(show_progress=False, max_shard_bytes=1 << 20)
    (result,) = drt.DatasetRuntime(1).write_cache(Source("rows", n, 4096), "s3://bench", writer_config=writer,
                                                  storage_options=storage)
    url = result.path
    config = drt.RemoteConfig(cache_dir=str(work / "node"), prefetch_shards=4)
    reader = drt.ReaderConfig(seed=1)
    return drt.DatasetRuntime(1).cached_dataset(url, reader_config=reader, storage_options=storage,
                                                remote_config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="cpu,http,remote,cache")
    parser.add_argument("--batches", type=int, default=2000, help="batches per run (an epoch)")
    parser.add_argument("--workers", default="1,2,4,8,16")
    parser.add_argument("--depths", default="1,2,4,8")
    parser.add_argument("--cap", type=int, default=2 << 30, help="autotune_memory_cap in bytes")
    parser.add_argument("--delay", type=float, default=0.01, help="seconds the HTTP server waits per request")
    parser.add_argument("--smoke", action="store_true", help="a tiny run: 80 batches, grid 1,2 x 1,2")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.smoke:
        args.batches, args.workers, args.depths = 80, "1,2", "1,2"
    workers, depths = [int(w) for w in args.workers.split(",")], [int(d) for d in args.depths.split(",")]
    n = args.batches * BATCH
    work, stack, results = Path(tempfile.mkdtemp()), [], {}
    try:
        for name in args.workloads.split(","):
            if name == "cpu":
                dataset, kwargs = Decode(n), {"multiprocessing_context": "fork"}
            elif name == "http":
                dataset, kwargs = http_dataset(n, args.delay, stack), {"worker_method": "thread"}
            elif name == "remote":
                dataset, kwargs = CacheRows(remote_dataset(n, work / name, stack)), {"worker_method": "thread"}
            elif name == "cache":  # the node cache is its own: the first epoch downloads, as remote's does
                dataset, kwargs = remote_dataset(n, work / name, stack), {"multiprocessing_context": "fork"}
            else:
                raise SystemExit(f"unknown workload {name!r}: cpu, http, remote or cache")
            results[name] = grid(dataset, args.batches, args.cap, workers, depths, **kwargs)
    finally:
        for stop in reversed(stack):
            stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"# autotune on {machine()}: {args.batches} batches of {BATCH}, grid workers {workers} x depth {depths}, "
          f"cap {args.cap:,} bytes")
    print("| workload | best fixed | its batches/s | auto batches/s | auto/best | settled at batch | chosen | "
          "auto peak MiB | cap MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        best, auto = r["fixed"][r["best"]], r["auto"]
        print(f"| {name} | {r['best']} | {best['throughput']:.1f} | {auto['throughput']:.1f} | {r['share']:.0%} | "
              f"{auto['settled_at']} ({'<=' if r['within_5pct'] else '>'} 5%) | {auto['chosen'][0]}x"
              f"{auto['chosen'][1]} | {auto['peak_bytes'] / 2**20:.1f} | {args.cap / 2**20:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
