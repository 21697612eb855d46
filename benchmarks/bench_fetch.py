"""Remote items (issues 7 and 26): HttpDataset against bare aiohttp and torch's DataLoader, one run.

2,048 items of 64 KiB from a local aiohttp server (its own process) that waits 10 ms per request. Interleaved
rounds (one of each per round, medians of ``--repeats``), all with 64 requests in flight:

- bare aiohttp: one ClientSession, a semaphore of 64, one gather, ``await response.read()`` into bytes;
- torch_drt per item: ``HttpDataset.aget`` in the same gather (the source's own cost: retries, time-outs, size
  limits, redaction), the dataset's session closed after each round;
- torch_drt loader: a fresh ``StatefulDataLoader`` per epoch, batch 64, 2 thread workers x 32 items.

The ratios to bare aiohttp are the figures of issue 26 (goal: <= 1.05x). Then, once each: torch's DataLoader with
8 worker processes doing blocking requests (urllib) and dataloader-rs (when its side venv exists).

    python benchmarks/bench_fetch.py [--repeats 5] [--skip-peers]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
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
IN_FLIGHT = 64


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


async def _bare(urls):
    import aiohttp

    semaphore = asyncio.Semaphore(IN_FLIGHT)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(url):
            async with semaphore, session.get(url) as response:
                return await response.read()

        return await asyncio.gather(*(one(u) for u in urls))


async def _per_item(dataset):
    semaphore = asyncio.Semaphore(IN_FLIGHT)

    async def one(index):
        async with semaphore:
            return await dataset.aget(index)

    try:
        return await asyncio.gather(*(one(i) for i in range(len(dataset))))
    finally:
        await dataset.aclose()


def timed(fn) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    assert len(out) == ITEMS and all(len(b) == SIZE for b in out)
    return elapsed, 0.0


def interleaved(sides: dict, repeats: int) -> dict[str, tuple[float, float, list[float], float]]:
    """Per side: median epoch, median first batch, every epoch and the median CPU seconds of this process (all its
    threads: the client's work, not the server's); one warm-up round, then one run of each side per round, the
    order rotating from round to round."""
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(repeats + 1):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            cpu = time.process_time()
            result = sides[name]()
            if round_:
                runs[name].append((*result, time.process_time() - cpu))
    return {
        name: (
            statistics.median(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            [r[0] for r in rs],
            statistics.median(r[2] for r in rs),
        )
        for name, rs in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-peers", action="store_true", help="only bare aiohttp and torch_drt")
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
    dataset = HttpDataset(urls)
    loader = lambda: StatefulDataLoader(  # noqa: E731
        HttpDataset(urls), batch_size=BATCH, num_workers=2, item_concurrency=IN_FLIGHT // 2, collate_fn=identity,
        worker_method="thread",
    )
    rs: dict = {"error": "--skip-peers"}
    theirs = None
    try:
        ours = interleaved(
            {
                "bare": lambda: timed(lambda: asyncio.run(_bare(urls))),
                "item": lambda: timed(lambda: asyncio.run(_per_item(dataset))),
                "loader": lambda: epoch(loader),
            },
            args.repeats,
        )
        if not args.skip_peers:
            side, reason = side_python(args.python313)
            rs = (
                run_side(side, "_side_dataloader_rs.py", str(args.repeats), base, str(ITEMS), str(SIZE))
                if side
                else {"error": reason}
            )
            theirs = interleaved(
                {"torch": lambda: epoch(lambda: DataLoader(Blocking(urls), batch_size=BATCH, num_workers=8,
                                                           collate_fn=identity))},
                max(1, args.repeats // 2),
            )["torch"]
    finally:
        server.terminate()
    ideal = ITEMS * DELAY / IN_FLIGHT
    bare, item, drt = ours["bare"][0], ours["item"][0], ours["loader"][0]
    print(
        f"# remote items on {machine()}: {ITEMS} x {SIZE // 1024} KiB, {DELAY * 1e3:.0f} ms per request, "
        f"{IN_FLIGHT} in flight, interleaved, median of {args.repeats}"
    )
    print(f"bare aiohttp, one session, one gather:      {bare:.3f}s  ({bare / ideal:.2f}x the ideal {ideal:.3f}s)")
    print(f"torch_drt HttpDataset.aget, same gather:    {item:.3f}s  ({item / ideal:.2f}x the ideal)")
    print(
        f"torch_drt loader, batch {BATCH}, 2 x {IN_FLIGHT // 2}:       {drt:.3f}s  ({drt / ideal:.2f}x the ideal)  "
        f"first batch {ours['loader'][1] * 1e3:6.1f} ms"
    )
    print(f"ratio per item / bare aiohttp: {item / bare:.3f}x, loader / bare aiohttp: {drt / bare:.3f}x (goal <= 1.05)")
    cpu = {name: v[3] for name, v in ours.items()}
    print(
        f"client CPU per epoch: bare {cpu['bare']:.3f}s, "
        f"per item {cpu['item']:.3f}s ({cpu['item'] / cpu['bare']:.3f}x), "
        f"loader {cpu['loader']:.3f}s ({cpu['loader'] / cpu['bare']:.3f}x)"
    )
    for name in ours:
        print(f"  {name} epochs: {' '.join(f'{t:.3f}' for t in ours[name][2])}")
    if theirs is not None:
        print(f"torch DataLoader, 8 processes (urllib):     {theirs[0]:.3f}s  first batch {theirs[1] * 1e3:6.1f} ms")
        print(f"ratio torch/torch_drt loader: {theirs[0] / drt:.2f}x")
    if "http" in rs:
        print(f"dataloader-rs HttpDataset, 64 in flight:    {rs['http']:.3f}s  ({rs['http'] / ideal:.2f}x the ideal)")
    else:
        print(f"dataloader-rs: skipped ({rs.get('error')})")
    if args.json:
        import json

        figures = {name: {"epoch": v[0], "first": v[1], "epochs": v[2], "cpu": v[3]} for name, v in ours.items()}
        figures |= {"torch": theirs and {"epoch": theirs[0], "first": theirs[1]}, "ideal": ideal, "dataloader-rs": rs}
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
