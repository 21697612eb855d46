"""Caches on object storage (issue 14): torch_drt against MosaicML Streaming and LitData, all reading the same data
from the same S3 server (moto) behind a proxy that adds 20 ms to every request.

Shuffled, batch 256, uint8 tensor batches, 0 and 2 loading workers; each library writes with its own writer and
reads with its own loader. Per library and worker count: time to first batch and cold epoch 1 (empty local
cache), warm epoch 2 (samples/s); the bytes downloaded in epoch 2 with a local cache of half the dataset; for
torch_drt the first batch after a mid-epoch resume against a warm batch; and the network ceiling (plain GETs of
every shard through the proxy, 8 at a time). Medians over ``--repeats`` rounds, the libraries interleaved per round.

    python benchmarks/bench_remote.py [--samples 16000] [--size 4096] [--shard-bytes 1048576] [--repeats 1]
                                      [--latency 0.02] [--skip-peers] [--json out.json]

Targets: cold and warm throughput >= 1.3x the better peer; time to first batch <= half the better peer's; epoch-2
bytes with a 50% cache <= 55% of the dataset; first batch after a resume <= 2x a warm batch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, run_side
from _envs import env_python
from _epochs import epochs
from _s3 import Servers, options, s3_session

import torch_drt as drt

BATCH, BUCKET, WINDOW = 256, "bench", 4
START = "fork"  # loading processes start as the peers' (torch's default on Linux); spawn re-imports torch in each


class Source:
    """The benchmark's payloads (the peers generate the same ones, same seed)."""

    def __init__(self, name: str, n: int, size: int) -> None:
        self.name, self.n, self.size = name, n, size

    def __iter__(self):
        rng = np.random.default_rng(0)
        for i in range(self.n):
            yield drt.CacheInput(rng.integers(0, 256, self.size, dtype=np.uint8).tobytes(), {"label": i % 1000})


def write_cache(servers: Servers, args: argparse.Namespace) -> str:
    """The benchmark's cache (``args.samples`` x ``args.size`` bytes, shards of ``args.shard_bytes``) at the bucket's
    URL, written once: its URL."""
    writer = drt.WriterConfig(show_progress=False, max_shard_bytes=args.shard_bytes)
    (result,) = drt.DatasetRuntime(1).write_cache(Source("drt", args.samples, args.size), f"s3://{BUCKET}",
                                                  writer_config=writer, storage_options=options(servers.endpoint))
    return result.path


def to_array(sample) -> np.ndarray:
    return np.frombuffer(sample.data, dtype=np.uint8)


def stack(items) -> torch.Tensor:
    return torch.from_numpy(np.stack(items))


def loader(ds: drt.CachedDataset, workers: int):
    return ds.to_torch_dataloader(sample_transform_fn=to_array, collate_fn=stack, batch_size=BATCH,
                                  num_workers=workers, native_num_workers=1, shard_window=WINDOW,
                                  multiprocessing_context=START)


def open_ours(servers: Servers, url: str, cache_dir: Path, limit: int | None = None) -> drt.CachedDataset:
    config = drt.RemoteConfig(cache_dir=str(cache_dir), cache_limit=limit, prefetch_shards=8)
    return drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=1, shard_window=WINDOW),
                                                storage_options=options(servers.proxy), remote_config=config)


def ours_epochs(servers: Servers, url: str, work: Path, workers: int) -> dict:
    cache = work / f"node-{workers}-{time.time_ns()}"
    figures = epochs(lambda: loader(open_ours(servers, url, cache), workers))  # the open is timed too
    shutil.rmtree(cache, ignore_errors=True)
    return figures


def ours_epoch2_bytes(servers: Servers, url: str, work: Path, data_bytes: int, small: int, workers: int) -> float:
    cache = work / f"half-{workers}-{time.time_ns()}"
    ds = open_ours(servers, url, cache, limit=data_bytes // 2 + small)
    it_loader = loader(ds, workers)
    sum(b.shape[0] for b in it_loader)
    time.sleep(0.5)  # prefetches of epoch 1 settle
    servers.stats(reset=True)
    sum(b.shape[0] for b in it_loader)
    got = servers.stats()["bytes_out"]
    held = ds.layouts[0].backend.node.usage()
    shutil.rmtree(cache, ignore_errors=True)
    print(f"  ({workers} workers) node cache after epoch 2: {held:,} bytes, limit {data_bytes // 2 + small:,}")
    return got / data_bytes


def ours_resume(servers: Servers, url: str, work: Path, resumes: int = 5) -> dict:
    """Warm node cache, 0 workers: the first batch after a mid-epoch resume against the median warm batch.

    Each resume opens the cache anew, builds a loader and loads the checkpoint (timed apart, as ``build``), then
    takes one batch (``resumed``); medians over ``resumes`` resumes."""
    cache = work / "resume"
    first = loader(open_ours(servers, url, cache), 0)
    sum(b.shape[0] for b in first)  # epoch 1 warms the cache
    it, warm = iter(first), []
    for _ in range(len(first) // 2):
        t = time.perf_counter()
        next(it)
        warm.append(time.perf_counter() - t)
    state = first.state_dict()
    del it
    built, resumed = [], []
    for _ in range(resumes):
        t = time.perf_counter()
        again = loader(open_ours(servers, url, cache), 0)
        again.load_state_dict(state)
        t1 = time.perf_counter()
        next(iter(again))
        resumed.append(time.perf_counter() - t1)
        built.append(t1 - t)
        del again
    return {"resumed": statistics.median(resumed), "warm": statistics.median(warm), "build": statistics.median(built),
            "resumes": resumes}


def ceiling(servers: Servers, url: str, layout: drt.CacheLayout, samples: int) -> dict:
    """Plain GETs of every shard through the proxy, 8 at a time: the network's samples/s."""
    import s3fs

    fs = s3fs.S3FileSystem(**options(servers.proxy), skip_instance_cache=True)
    paths = [f"{url[5:]}/shards/{name}" for name, _ in layout.shards]
    t = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        total = sum(len(b) for b in pool.map(fs.cat_file, paths))
    took = time.perf_counter() - t
    return {"samples_per_s": samples / took, "mb_per_s": total / took / 1e6}


def median_of(rounds: list[dict]) -> dict:
    """Per key, the median over the rounds; a key that failed in a round keeps that round's error."""
    out: dict = {}
    for key, value in rounds[0].items():
        failed = next((r[key] for r in rounds if isinstance(r.get(key), dict)), None)
        if failed is not None:
            out[key] = failed
        elif isinstance(value, int | float):
            out[key] = statistics.median(r[key] for r in rounds)
    return out


def peer_figures(rounds: list[dict], name: str) -> dict:
    """A peer's medians per worker count, or its error."""
    results = [r.get(name, {"error": "no result"}) for r in rounds]
    if "error" in results[0]:
        return results[0]
    figures = {}
    for w in (0, 2):
        per = [r[f"w{w}"] for r in results]
        figures[f"w{w}"] = per[0] if "error" in per[0] else median_of(per)
    return figures


def peers(servers: Servers, args: argparse.Namespace, work: Path) -> dict:
    py = env_python("peers")
    if args.skip_peers or not py.exists():
        reason = "--skip-peers" if args.skip_peers else f"no peers environment at {py.parents[1]}"
        return {"mosaicml-streaming": {"error": reason}, "litdata": {"error": reason}}
    config = {"endpoint": servers.endpoint, "proxy": servers.proxy, "bucket": BUCKET, "samples": args.samples,
              "size": args.size, "shard_bytes": args.shard_bytes, "batch": BATCH, "workers": [0, 2],
              "work": str(work / "peers"), "timeout": args.peer_timeout}
    return run_side(py, "_side_remote_peers.py", json.dumps(config), timeout=3600)


def _cells(r: dict) -> str:
    if "error" in r:
        return f"skipped: {r['error']}"
    half = r["epoch2_bytes"]
    half = f"{half:.0%}" if isinstance(half, float) else f"skipped: {half['error']}"
    return f"{r['ttfb'] * 1e3:>9.0f} {r['epoch1']:>10,.0f} {r['epoch2']:>10,.0f} {half:>19}"


def report(ours: dict, theirs: dict, extra: dict) -> None:
    print(f"\n## torch_drt (shard_window={WINDOW}) against peers, batch {BATCH}, shuffled")
    print(f"{'library':<20} {'workers':>7} {'TTFB ms':>9} {'cold/s':>10} {'warm/s':>10} {'epoch-2 bytes (50%)':>19}")
    for w in (0, 2):
        rows = [("torch_drt", ours[f"w{w}"])] + [(n, r.get(f"w{w}", r)) for n, r in theirs.items()]
        for name, r in rows:
            print(f"{name:<20} {w:>7} {_cells(r)}")
        peer_rows = [r for _, r in rows[1:] if "error" not in r]
        if peer_rows:
            o = ours[f"w{w}"]
            best = {k: max(r[k] for r in peer_rows) for k in ("epoch1", "epoch2")}
            ttfb = min(r["ttfb"] for r in peer_rows)
            print(f"  ratios ({w} workers): cold {o['epoch1'] / best['epoch1']:.2f}x, warm "
                  f"{o['epoch2'] / best['epoch2']:.2f}x (target >= 1.3x); TTFB {o['ttfb'] / ttfb:.2f} of the best "
                  "peer's (target <= 0.5)")
    r = extra["resume"]
    print(f"resume mid-epoch: first batch {r['resumed'] * 1e3:.1f} ms, warm batch {r['warm'] * 1e3:.1f} ms "
          f"({r['resumed'] / r['warm']:.2f}x, target <= 2x; medians of {r['resumes']} resumes); opening the cache, "
          f"building the loader and loading the checkpoint before it: {r['build'] * 1e3:.1f} ms")
    c = extra["ceiling"]
    print(f"network ceiling (plain GETs of every shard, 8 at a time): {c['samples_per_s']:,.0f} samples/s, "
          f"{c['mb_per_s']:.0f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--shard-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--peer-timeout", type=int, default=300, help="seconds per peer measurement")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    print(f"# bench_remote on {machine()}: {args.samples} x {args.size} B, shards {args.shard_bytes:,} B, "
          f"{args.latency * 1e3:.0f} ms per request")
    with s3_session("bench_remote_", args.latency, BUCKET) as (servers, work):
        url = write_cache(servers, args)
        layout = drt.cache.open_cache(url, storage_options=options(servers.endpoint),
                                      remote_config=drt.RemoteConfig(cache_dir=str(work / "probe")))
        data_bytes = sum(s for _, s in layout.shards)
        files = json.loads(layout.backend.read("manifest.json", 1 << 26))["files"]
        small = sum(f["byte_len"] for f in files.values())  # index and metadata stay in the node cache too
        ours_rounds, peer_rounds = {0: [], 2: []}, []
        for _ in range(args.repeats):
            for w in (0, 2):
                ours_rounds[w].append(ours_epochs(servers, url, work, w))
            peer_rounds.append(peers(servers, args, work))
        ours = {}
        for w in (0, 2):
            ours[f"w{w}"] = median_of(ours_rounds[w])
            ours[f"w{w}"]["epoch2_bytes"] = ours_epoch2_bytes(servers, url, work, data_bytes, small, w)
        theirs = {name: peer_figures(peer_rounds, name) for name in ("mosaicml-streaming", "litdata")}
        extra = {"resume": ours_resume(servers, url, work), "ceiling": ceiling(servers, url, layout, args.samples)}
        report(ours, theirs, extra)
        if args.json:
            Path(args.json).write_text(json.dumps({"torch_drt": ours, "peers": theirs, **extra,
                                                   "samples": args.samples, "size": args.size,
                                                   "latency": args.latency, "window": WINDOW}, indent=2))


if __name__ == "__main__":
    main()
