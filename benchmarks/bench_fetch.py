"""Remote items (issues 7 and 26): HttpDataset against bare aiohttp and torch's DataLoader, one run.

2,048 items of 64 KiB from a local aiohttp server (its own process) that waits 10 ms per request. Interleaved
rounds (one of each per round, the order rotating, a garbage collection before each run; medians of
``--repeats``), all with 64 requests in flight on the default asyncio event loop:

- bare aiohttp: one ClientSession (``TCPConnector(limit=0)``, closed after each round), a semaphore of 64, one
  gather, ``await response.read()`` into bytes;
- torch_drt per item: ``HttpDataset.aget`` in the same gather (the source's own cost: retries, time-outs, size
  limits, redaction), the dataset's session (``limit=0`` too) closed after each round;
- torch_drt loader: a fresh ``StatefulDataLoader`` per epoch, batch 64, 2 thread workers x 32 items.

Both gathers return the bodies' lengths, not the bodies: ``asyncio.run`` shows its main task's result in a repr
when it restores the SIGINT handler, and the repr of a list of 64 KiB bytes costs ~4% of an epoch's CPU.

The ratios to bare aiohttp are the figures of issue 26 (goal: <= 1.05x): the median of the per-round ratios of
wall time, and of client CPU time (this process, all its threads; the server's is not counted), which a loaded
machine disturbs far less. Then, once each: torch's DataLoader with 8 worker processes doing blocking requests
(urllib) and dataloader-rs (when its side venv exists).

    python benchmarks/bench_fetch.py [--repeats 5] [--skip-peers]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

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

        return [len(body) for body in await asyncio.gather(*(one(u) for u in urls))]


async def _per_item(dataset):
    semaphore = asyncio.Semaphore(IN_FLIGHT)

    async def one(index):
        async with semaphore:
            return await dataset.aget(index)

    try:
        return [len(body) for body in await asyncio.gather(*(one(i) for i in range(len(dataset))))]
    finally:
        await dataset.aclose()


def timed(fn) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    assert out == [SIZE] * ITEMS
    return elapsed, 0.0


class Side(NamedTuple):
    """One side's medians over the rounds: epoch and first batch (wall seconds), client CPU seconds; every epoch."""

    epoch: float
    first: float
    cpu: float
    epochs: list[float]
    cpus: list[float]


def interleaved(sides: dict, repeats: int) -> dict[str, Side]:
    """Each side's figures: one warm-up round, then one run of each side per round, the order rotating from round
    to round and a garbage collection before each run (outside its time). CPU is this process's, all its threads
    (the client's work, not the server's)."""
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(repeats + 1):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            gc.collect()
            cpu = time.process_time()
            result = sides[name]()
            if round_:
                runs[name].append((*result, time.process_time() - cpu))
    return {
        name: Side(
            statistics.median(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            statistics.median(r[2] for r in rs),
            [r[0] for r in rs],
            [r[2] for r in rs],
        )
        for name, rs in runs.items()
    }


def paired(side: list[float], reference: list[float]) -> float:
    """The median of the per-round ratios ``side / reference`` (rounds ran back to back: a slow spell of a loaded
    machine hits both)."""
    return statistics.median(a / b for a, b in zip(side, reference, strict=True))


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
    bare, item, drt = ours["bare"].epoch, ours["item"].epoch, ours["loader"].epoch
    ratios = {
        name: {"wall": paired(side.epochs, ours["bare"].epochs), "cpu": paired(side.cpus, ours["bare"].cpus)}
        for name, side in ours.items()
        if name != "bare"
    }
    print(
        f"# remote items on {machine()}: {ITEMS} x {SIZE // 1024} KiB, {DELAY * 1e3:.0f} ms per request, "
        f"{IN_FLIGHT} in flight, interleaved, median of {args.repeats}"
    )
    print(f"bare aiohttp, one session, one gather:      {bare:.3f}s  ({bare / ideal:.2f}x the ideal {ideal:.3f}s)")
    print(f"torch_drt HttpDataset.aget, same gather:    {item:.3f}s  ({item / ideal:.2f}x the ideal)")
    print(
        f"torch_drt loader, batch {BATCH}, 2 x {IN_FLIGHT // 2}:       {drt:.3f}s  ({drt / ideal:.2f}x the ideal)  "
        f"first batch {ours['loader'].first * 1e3:6.1f} ms"
    )
    print(
        f"ratio per item / bare aiohttp: wall {ratios['item']['wall']:.3f}x, CPU {ratios['item']['cpu']:.3f}x; "
        f"loader / bare aiohttp: wall {ratios['loader']['wall']:.3f}x, CPU {ratios['loader']['cpu']:.3f}x "
        "(goal <= 1.05; medians of the per-round ratios)"
    )
    print(
        "client CPU per item: "
        + ", ".join(f"{name} {ours[name].cpu / ITEMS * 1e6:.0f} us" for name in ("bare", "item", "loader"))
    )
    for name in ours:
        print(f"  {name} epochs: {' '.join(f'{t:.3f}' for t in ours[name].epochs)}  "
              f"CPU: {' '.join(f'{t:.3f}' for t in ours[name].cpus)}")
    if theirs is not None:
        first = theirs.first * 1e3
        print(f"torch DataLoader, 8 processes (urllib):     {theirs.epoch:.3f}s  first batch {first:6.1f} ms")
        print(f"ratio torch/torch_drt loader: {theirs.epoch / drt:.2f}x")
    if "http" in rs:
        print(f"dataloader-rs HttpDataset, 64 in flight:    {rs['http']:.3f}s  ({rs['http'] / ideal:.2f}x the ideal)")
    else:
        print(f"dataloader-rs: skipped ({rs.get('error')})")
    if args.json:
        import json

        figures = {name: v._asdict() for name, v in ours.items()}
        figures |= {"torch": theirs and {"epoch": theirs.epoch, "first": theirs.first}, "ideal": ideal,
                    "ratios": ratios, "dataloader-rs": rs}
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
