"""Time to the first batch from a cache on S3 (issue 26), and its floor measured in the same run.

The workload of ``bench_remote.py`` (moto behind a proxy adding ``--latency`` to every request; shuffled, batch 256,
shard window 4, uint8 tensor batches, 0 and 2 loading processes started with fork; a new, empty node cache each
time; the open is timed too), without its epochs, peers and resumes: only the first batch, ``--repeats`` rounds,
the worker counts interleaved. The floor of each round, measured right after it with plain requests through the
same proxy (s3fs, the same client library):

- ``open``: the manifest, the index and the metadata requested at once (one round trip: what an open needs);
- ``shards``: the shards of the first batch requested at once (all of them: they are downloaded whole);
- ``fork``: one ``os.fork()`` of this process (torch imported, the dataset open), the child exiting at once.

A loader with 0 workers cannot give its first batch sooner than ``open + shards``; one with loading processes not
sooner than ``open + fork + shards`` (the first batch is read in the first process forked). The time the loader's
forks took (all of them, each from the last hook before it to the first after it: ``_fork_clock``) is printed too:
while a fork runs, the forking process holds the GIL, so its download threads stop. What is left
(``ttfb - floor``) is the CPU of torch_drt, of the client library's requests beyond the floor's, and of the
benchmark's transform and collate on the critical path.

    python benchmarks/bench_remote_first_batch.py [--samples 20000] [--size 16384] [--repeats 5] [--latency 0.02]

Target: time to first batch <= 0.1 s with 0 and with 2 workers.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fork_clock  # first: its fork hooks time the forks alone (see the module)
from _common import machine
from _s3 import options, s3_session
from bench_remote import BUCKET, WINDOW, loader, open_ours, write_cache

from torch_drt.cache.validate import load_index

WORKERS = (0, 2)


def ttfb(servers, url: str, work: Path, workers: int, forks: list[float]) -> float:
    """``bench_remote``'s time to first batch: open, loader, ``next(iter(...))``, a new node cache; the time its
    forks took is added to ``forks``."""
    cache = work / f"node-{workers}-{time.time_ns()}"
    _fork_clock.forks.clear()
    t0 = time.perf_counter()
    it = iter(loader(open_ours(servers, url, cache), workers))
    next(it)
    took = time.perf_counter() - t0
    forks.append(sum(_fork_clock.forks))
    del it
    gc.collect()
    time.sleep(1.0)  # the abandoned loader's downloads in flight settle before the next round
    shutil.rmtree(cache, ignore_errors=True)
    return took


def first_shards(servers, url: str, work: Path) -> list[str]:
    """The shard files the first batch reads (the same seed, window and batch size as the timed loaders)."""
    ds = open_ours(servers, url, work / "first-ids")
    ids = next(iter(ds.to_torch_dataloader(sample_transform_fn=lambda s: s.sample_id, collate_fn=list,
                                           batch_size=256, num_workers=0, shard_window=WINDOW)))
    layout = ds.layouts[0]
    index_file, index = load_index(layout)
    numbers = np.unique(index["shard"][np.asarray(ids)]).tolist()
    index_file.close()
    return [layout.shard_path(n) for n in numbers]


def floor(servers, url: str, shards: list[str]) -> dict[str, float]:
    """The round trips and forks a first batch cannot do without (see the module docstring)."""
    import s3fs

    fs = s3fs.S3FileSystem(**options(servers.proxy), skip_instance_cache=True)
    root = url[len("s3://"):]
    fs.cat_file(f"{root}/manifest.json")  # the client's connection and first-request costs, out of the figures
    out = {}
    with ThreadPoolExecutor(8) as pool:
        for name, rels in (("open", ["manifest.json", "index.bin", "metadata.arrow"]), ("shards", shards)):
            t = time.perf_counter()
            list(pool.map(fs.cat_file, [f"{root}/{rel}" for rel in rels]))
            out[name] = time.perf_counter() - t
    forks = []
    for _ in range(5):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forks.append(time.perf_counter() - t)
        os.waitpid(pid, 0)
    out["fork"] = statistics.median(forks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--shard-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args()
    print(f"# bench_remote_first_batch on {machine()}: {args.samples} x {args.size} B, shards {args.shard_bytes:,} B, "
          f"{args.latency * 1e3:.0f} ms per request, medians of {args.repeats}")
    with s3_session("bench_first_", args.latency, BUCKET) as (servers, work):
        url = write_cache(servers, args)
        shards = first_shards(servers, url, work)  # also warms imports and the store client, as bench_remote's probe
        times: dict[int, list[float]] = {w: [] for w in WORKERS}
        forked: dict[int, list[float]] = {w: [] for w in WORKERS}
        floors: list[dict[str, float]] = []
        for _ in range(args.repeats):
            for w in WORKERS:
                times[w].append(ttfb(servers, url, work, w, forked[w]))
            floors.append(floor(servers, url, shards))
            got = ", ".join(f"{times[w][-1] * 1e3:.0f}" for w in WORKERS)
            parts = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in floors[-1].items())
            print(f"  round: TTFB {got} ms ({WORKERS} workers); floor parts {parts} ms", flush=True)
    f = {k: statistics.median(r[k] for r in floors) for k in floors[0]}
    print(f"floor parts: open {f['open'] * 1e3:.0f} ms (manifest, index, metadata at once), first batch's "
          f"{len(shards)} shards at once {f['shards'] * 1e3:.0f} ms, one fork {f['fork'] * 1e3:.0f} ms")
    print(f"{'workers':>7} {'TTFB ms':>8} {'floor ms':>9} {'TTFB - floor':>13} {'its forks ms':>13}  "
          "(target TTFB <= 100 ms; the forks while the first shards download, against one fork in the floor)")
    for w in WORKERS:
        t = statistics.median(times[w])
        low = f["open"] + f["shards"] + (f["fork"] if w else 0.0)
        print(f"{w:>7} {t * 1e3:>8.0f} {low * 1e3:>9.0f} {(t - low) * 1e3:>13.0f} "
              f"{statistics.median(forked[w]) * 1e3:>13.0f}")


if __name__ == "__main__":
    main()
