"""Datasets in other systems' formats (issue 27): torch_drt reading each format where it lies against that system's
own loader, on the same files.

MDS and LitData: written by their own writers (MDS with sha256 hashes) to moto S3, every read through the proxy
that adds ``--latency`` to each request (the harness of bench_remote.py); torch_drt reads them with ``MDSDataset``
/ ``LitDataset`` and the locality-aware permutation over their shards (``ShardWindowShuffle``, window 4); the peers
with their own ``StreamingDataset`` loaders (shuffled). LitData's items hold the payload as a uint8 array (items of
bytes and ints alone are written with an Arrow row footer, which torch_drt does not read yet). WebDataset: tars
written by webdataset's ``TarWriter`` on the same S3, torch_drt with a full permutation of every sample,
webdataset's ``WebLoader`` with shard shuffle and a 1,000-sample buffer (over HTTP through the same proxy).
Parquet: one local file, torch_drt's ``ParquetDataset`` with a full permutation against ``datasets``'
``Dataset.from_parquet(...).with_format("torch")`` in torch's ``DataLoader`` (shuffled).

Per system and worker count (0, 2): time to first batch (the dataset's opening included), cold epoch 1 and warm
epoch 2 (samples/s); the runs interleaved (torch_drt, then the peer, per round), medians over ``--repeats``
rounds, ratios printed at the end.

    python benchmarks/bench_formats.py [--samples 16000] [--size 4096] [--shard-bytes 1048576] [--repeats 3]
                                       [--latency 0.02] [--batch 256] [--systems mds,litdata,webdataset,parquet]
                                       [--json out.json]

Targets: MDS and LitData cold and warm >= 1.3x their own loader, first batch <= half; WebDataset >= WebLoader;
Parquet >= datasets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, run_side
from _envs import env_python
from _epochs import epochs
from _s3 import Servers, options, s3_session

import torch_drt as drt
from torch_drt.formats import LitDataset, MDSDataset, ParquetDataset, WebDatasetShards
from torch_drt.sampling.locality import ShardWindowShuffle

BUCKET, WINDOW, SYSTEMS = "formats", 4, ("mds", "litdata", "webdataset", "parquet")
PEER = {"mds": "mosaicml-streaming", "litdata": "litdata", "webdataset": "webdataset WebLoader",
        "parquet": 'datasets with_format("torch")'}


def collate(items) -> torch.Tensor:
    return torch.from_numpy(np.stack([as_array(x["data"]) for x in items]))


def as_array(data) -> np.ndarray:
    return data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)


def one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


class WindowSampler:
    """The locality-aware permutation over a foreign dataset's shards, a new one each epoch."""

    def __init__(self, groups: np.ndarray, window: int, seed: int) -> None:
        self.order, self.epoch = ShardWindowShuffle(groups, window=window, seed=seed), 0

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        rows = self.order.indices(self.epoch, np.arange(len(self.order), dtype=np.int64))
        self.epoch += 1
        return iter(rows.tolist())


def write_ours(system: str, args: argparse.Namespace, servers: Servers, work: Path, cfg: dict) -> dict:
    """Write the dataset of ``system`` with its own writer (the peers venv for MDS and LitData); return where."""
    prefix = f"{system}-{args.samples}-{args.size}-{args.shard_bytes}"
    if system in ("mds", "litdata"):
        got = run_side(env_python("peers"), "_side_formats_peers.py",
                       json.dumps({**cfg, "do": "write", "system": system, "prefix": prefix}), timeout=1800)
        return {"error": got["error"]} if "error" in got else {"url": f"s3://{BUCKET}/{prefix}", "prefix": prefix}
    rng = np.random.default_rng(0)  # the payloads the peers' writers write (same seed)
    data = [rng.integers(0, 256, args.size, dtype=np.uint8).tobytes() for _ in range(args.samples)]
    if system == "webdataset":
        import s3fs
        import webdataset as wds

        per = max(1, args.shard_bytes // args.size)
        shards = -(-args.samples // per)
        fs = s3fs.S3FileSystem(**options(servers.endpoint))
        for s in range(shards):
            local = work / f"shard-{s:06d}.tar"
            with wds.TarWriter(str(local)) as sink:
                for i in range(s * per, min(args.samples, (s + 1) * per)):
                    sink.write({"__key__": f"{i:08d}", "data": data[i], "cls": str(i % 1000).encode()})
            fs.put_file(str(local), f"{BUCKET}/{prefix}/{local.name}")
            fs.chmod(f"{BUCKET}/{prefix}/{local.name}", "public-read")  # webdataset fetches it by plain HTTP GETs
            local.unlink()
        url = f"s3://{BUCKET}/{prefix}/shard-{{000000..{shards - 1:06d}}}.tar"
        return {"url": url, "prefix": prefix, "shards": shards}
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = work / f"{prefix}.parquet"
    data = [d[:-1] + b"\x01" for d in data]  # datasets' torch format drops a value's trailing NUL bytes (numpy S)
    table = pa.table({"data": pa.array(data, pa.binary()), "label": [i % 1000 for i in range(args.samples)]})
    pq.write_table(table, path, row_group_size=max(1, args.shard_bytes // args.size))
    return {"url": str(path), "path": str(path), "prefix": prefix}


def ours_loader(system: str, where: dict, servers: Servers, cache: Path, workers: int, batch: int):
    remote = {"storage_options": options(servers.proxy),
              "remote_config": drt.RemoteConfig(cache_dir=str(cache), prefetch_shards=8)}
    fork = {"multiprocessing_context": "fork", "persistent_workers": True} if workers else {}  # as the peers' loaders
    if system == "parquet":
        ds = ParquetDataset(where["path"])
    else:
        ds = {"mds": MDSDataset, "litdata": LitDataset, "webdataset": WebDatasetShards}[system](where["url"], **remote)
    if system in ("mds", "litdata"):  # shard-local order, as the peers' shard-block shuffles
        order = {"sampler": WindowSampler(ds.shard_groups(), WINDOW, 1)}
    else:
        order = {"shuffle": True, "seed": 1}
    return drt.StatefulDataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=collate, **order, **fork)


def ours(system: str, where: dict, servers: Servers, work: Path, workers: int, batch: int) -> dict:
    cache = work / f"node-{system}-{workers}-{time.time_ns()}"
    try:
        return epochs(lambda: ours_loader(system, where, servers, cache, workers, batch))
    except Exception as e:
        return {"error": one_line(e)}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def theirs(system: str, where: dict, cfg: dict, workers: int, timeout: int) -> dict:
    py = Path(sys.executable) if system == "webdataset" else env_python("peers")
    if not py.exists():
        return {"error": f"no peers environment at {py.parents[1]} (benchmarks/setup_peers.sh)"}
    run = {**cfg, **where, "do": "run", "system": system, "workers": workers}
    try:
        return run_side(py, "_side_formats_peers.py", json.dumps(run), timeout=timeout)
    except Exception as e:  # a hung peer is reported, not waited on
        return {"error": one_line(e)}


def median_of(rounds: list[dict]) -> dict:
    failed = next((r for r in rounds if "error" in r), None)
    if failed is not None:
        return failed
    return {k: statistics.median(r[k] for r in rounds) for k in ("ttfb", "epoch1", "epoch2", "count")}


def report(results: dict) -> None:
    print(f"\n{'system':<11} {'library':<30} {'workers':>7} {'TTFB ms':>9} {'cold/s':>10} {'warm/s':>10}")
    for system, by_lib in results.items():
        for w in ("w0", "w2"):
            for lib, figures in by_lib.items():
                f = figures[w]
                cells = (f"skipped: {f['error']}" if "error" in f else
                         f"{f['ttfb'] * 1e3:>9.0f} {f['epoch1']:>10,.0f} {f['epoch2']:>10,.0f}")
                print(f"{system:<11} {lib:<30} {w[1:]:>7} {cells}")
    print("\nratios, torch_drt / the system's own loader (targets: MDS, LitData cold and warm >= 1.3x, first batch "
          "<= 0.5; WebDataset and Parquet >= 1x):")
    for system, by_lib in results.items():
        for w in ("w0", "w2"):
            o, p = by_lib["torch_drt"][w], by_lib[PEER[system]][w]
            if "error" in o or "error" in p:
                print(f"  {system:<11} {w[1:]} workers: no ratio ({o.get('error') or p.get('error')})")
                continue
            print(f"  {system:<11} {w[1:]} workers: cold {o['epoch1'] / p['epoch1']:.2f}x, warm "
                  f"{o['epoch2'] / p['epoch2']:.2f}x, first batch {o['ttfb'] / p['ttfb']:.2f} of theirs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16000, help="samples in each dataset")
    parser.add_argument("--size", type=int, default=4096, help="bytes of each sample's payload")
    parser.add_argument("--shard-bytes", type=int, default=1 << 20, help="bytes per shard, chunk, tar or row group")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; figures are medians over them")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds the proxy adds to each request")
    parser.add_argument("--batch", type=int, default=256, help="samples per batch")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--peer-timeout", type=int, default=600, help="seconds per peer measurement")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if unknown := sorted(set(systems) - set(SYSTEMS)):
        parser.error(f"unknown systems {unknown}")
    print(f"# bench_formats on {machine()}: {args.samples} x {args.size} B, shards {args.shard_bytes:,} B, "
          f"{args.latency * 1e3:.0f} ms per request, batch {args.batch}, {args.repeats} rounds")
    with s3_session("bench_formats_", args.latency, BUCKET) as (servers, work):
        cfg = {"endpoint": servers.endpoint, "proxy": servers.proxy, "bucket": BUCKET, "samples": args.samples,
               "size": args.size, "shard_bytes": args.shard_bytes, "batch": args.batch, "work": str(work / "side")}
        where = {s: write_ours(s, args, servers, work, cfg) for s in systems}
        rounds: dict = {s: {"torch_drt": {0: [], 2: []}, PEER[s]: {0: [], 2: []}} for s in systems}
        for _ in range(args.repeats):
            for s in systems:
                for w in (0, 2):
                    if "error" in where[s]:
                        figures = [where[s], where[s]]
                    else:
                        figures = [ours(s, where[s], servers, work, w, args.batch),
                                   theirs(s, where[s], cfg, w, args.peer_timeout)]
                    for lib, got in zip(("torch_drt", PEER[s]), figures):
                        rounds[s][lib][w].append(got)
        results = {s: {lib: {f"w{w}": median_of(r) for w, r in by_w.items()} for lib, by_w in libs.items()}
                   for s, libs in rounds.items()}
        report(results)
        if args.json:
            Path(args.json).write_text(json.dumps({"results": results, "samples": args.samples, "size": args.size,
                                                   "latency": args.latency, "batch": args.batch,
                                                   "repeats": args.repeats, "window": WINDOW}, indent=2))


if __name__ == "__main__":
    main()
