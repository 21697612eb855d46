"""Remote items (issue 7): HttpDataset against torch's DataLoader with blocking requests, one run.

2,048 items of 64 KiB from a local aiohttp server (its own process) that waits 10 ms per request, batch 64, a
fresh loader per epoch: torch_drt with 64 requests in flight (2 workers x 32 items) against the ideal
2,048 x 10 ms / 64, and against torch's DataLoader with 8 worker processes doing blocking requests (urllib).
First-batch latency printed beside torch's.

    python benchmarks/bench_fetch.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from _common import machine, run_side, side_python  # noqa: E402
from http_server import serve_forever  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from torch_drt import HttpDataset, StatefulDataLoader  # noqa: E402

ITEMS, SIZE, BATCH, DELAY = 2048, int(os.environ.get("BENCH_SIZE", 64 * 1024)), 64, 0.010


class Blocking:
    def __init__(self, urls):
        self.urls = urls

    def __len__(self):
        return len(self.urls)

    def __getitem__(self, i):
        with urllib.request.urlopen(self.urls[i], timeout=30) as r:
            return r.read()


def identity(batch):
    return batch


def epoch(make_loader) -> tuple[float, float]:
    t0 = time.perf_counter()
    loader = make_loader()
    first = None
    n = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        n += len(batch)
    assert n == ITEMS
    total = time.perf_counter() - t0
    if hasattr(loader, "close"):
        loader.close()
    return total, first


async def _floor(urls):
    import asyncio

    import aiohttp

    semaphore = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(url):
            async with semaphore, session.get(url) as response:
                return await response.read()

        return await asyncio.gather(*(one(u) for u in urls))


def floor(urls) -> float:
    """The same requests with bare aiohttp (64 at a time, one gather, no loader): this machine's ceiling."""
    import asyncio

    t0 = time.perf_counter()
    asyncio.run(_floor(urls))
    return time.perf_counter() - t0


def median(runs):
    runs = sorted(runs)
    return runs[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--python313", help="a Python 3.13 with dataloader-rs (default: the .bench/py313 venv)")
    args = parser.parse_args()
    port_file = Path(tempfile.mkdtemp()) / "port"
    server = multiprocessing.get_context("spawn").Process(
        target=serve_forever, args=(str(port_file), DELAY), daemon=True
    )
    server.start()
    while not port_file.exists() or not port_file.read_text():
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port_file.read_text()}"
    urls = [f"{base}/item/{i}?size={SIZE}" for i in range(ITEMS)]
    try:
        ours = [
            epoch(
                lambda: StatefulDataLoader(
                    HttpDataset(urls), batch_size=BATCH, num_workers=2, item_concurrency=32, collate_fn=identity,
                    worker_method="thread",
                )
            )
            for _ in range(args.repeats + 1)
        ][1:]
        bare = median([floor(urls) for _ in range(args.repeats)])
        side, reason = side_python(args.python313)
        rs = (
            run_side(side, "_side_dataloader_rs.py", str(args.repeats), base, str(ITEMS), str(SIZE))
            if side
            else {"error": reason}
        )
        theirs = [
            epoch(lambda: DataLoader(Blocking(urls), batch_size=BATCH, num_workers=8, collate_fn=identity))
            for _ in range(args.repeats)
        ]
    finally:
        server.terminate()
    ideal = ITEMS * DELAY / 64
    o_total, o_first = median([r[0] for r in ours]), median([r[1] for r in ours])
    t_total, t_first = median([r[0] for r in theirs]), median([r[1] for r in theirs])
    print(
        f"# remote items on {machine()}: {ITEMS} x {SIZE // 1024} KiB, {DELAY * 1e3:.0f} ms per request, "
        f"batch {BATCH}, fresh loader per epoch, median of {args.repeats}"
    )
    print(
        f"torch_drt HttpDataset, 64 in flight:        {o_total:.3f}s  first batch {o_first * 1e3:6.1f} ms  "
        f"({o_total / ideal:.2f}x the ideal {ideal:.3f}s, target <= 1.3)"
    )
    print(
        f"bare aiohttp, 64 at a time, no loader:      {bare:.3f}s  ({bare / ideal:.2f}x the ideal: this machine's "
        "client and server CPU)"
    )
    print(f"torch DataLoader, 8 processes (urllib):     {t_total:.3f}s  first batch {t_first * 1e3:6.1f} ms")
    if "http" in rs:
        print(f"dataloader-rs HttpDataset, 64 in flight:    {rs['http']:.3f}s  ({rs['http'] / ideal:.2f}x the ideal)")
    else:
        print(f"dataloader-rs: skipped ({rs.get('error')})")
    print(f"ratio torch/torch_drt: {t_total / o_total:.2f}x (target >= 4x)")
    if args.json:
        import json

        Path(args.json).write_text(
            json.dumps(
                {
                    "drt": o_total,
                    "drt_first": o_first,
                    "torch": t_total,
                    "torch_first": t_first,
                    "bare_aiohttp": bare,
                    "ideal": ideal,
                    "dataloader-rs": rs,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
