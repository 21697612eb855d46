"""The image pipeline on the loader's calling thread (issue 21): num_workers=0 against one worker thread.

The same JPEG files (generated once, 256-400 x 192-300) and the same steps everywhere: Decode, RandomResizedCrop(224),
RandomHorizontalFlip, then ToFloat + Normalize + ToChw with torch's default collate (``--collate default``) or
ImageCollator(normalize=) (``--collate image``), batches of 32. Rows: torch_drt's StatefulDataLoader with
num_workers=0 (the pipeline on the calling thread) and with one worker thread, and torch's DataLoader with
num_workers=0 running the same transforms in ``__getitem__``. torch's thread count is left as it is (the point:
no ``torch.set_num_threads(1)`` in user code); ``--threads N`` sets it first, for comparison.

Each row runs in a fresh process (a warm-up epoch, then ``--epochs`` timed epochs, median): OpenMP's state is
per process and changes with what ran before (libgomp spins less once a process has more OpenMP threads than
CPUs), so rows in one process would measure each other. Before loading, the main thread runs one large torch op,
as a training process has (a model step): its OpenMP threads exist, as they do when a user loads batches.
The figures are images/s, and the CPU time the process spent per image (all its threads: spinning OpenMP
threads count). The load average is printed: on a busy machine a version without the fix gives widely varying
0-worker figures (each small torch op waits for OpenMP helper threads).

    python benchmarks/bench_main_thread.py [--images 200] [--epochs 3] [--collate default|image|both] [--threads N]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image as P
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 32


def make_jpegs(n: int) -> list[bytes]:
    """``n`` photo-like JPEG images (smooth regions and noise), quality 90."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        w, h = int(rng.integers(256, 401)), int(rng.integers(192, 301))
        base = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        arr = np.asarray(P.fromarray(base).resize((w, h), P.BICUBIC))
        arr = (arr.astype(np.int16) + rng.integers(-6, 7, arr.shape)).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        P.fromarray(arr).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def pipeline(collate: str) -> tuple[T.Compose, Callable | None]:
    """(transform, collate_fn) of one variant."""
    steps = [T.Decode(), T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    if collate == "image":
        return T.Compose(steps), ImageCollator(normalize=(MEAN, STD))
    return T.Compose([*steps, T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]), None


class Transformed(Dataset):
    """The transform in ``__getitem__``, for torch's DataLoader."""

    def __init__(self, items: list[bytes], transform: T.Compose) -> None:
        self.items, self.transform = items, transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.items[i])


ROWS = ("torch_drt, num_workers=0", "torch_drt, 1 worker thread", "torch DataLoader, num_workers=0")


def make_loader(row: str, items: list[bytes], collate: str) -> object:
    transform, collate_fn = pipeline(collate)
    if row.startswith("torch DataLoader"):
        extra = {"collate_fn": collate_fn} if collate_fn is not None else {}
        return DataLoader(Transformed(items, transform), batch_size=BATCH, **extra)
    kwargs = {"collate_fn": collate_fn} if collate_fn is not None else {}
    workers = {"num_workers": 0} if row.endswith("=0") else {"num_workers": 1, "worker_method": "thread"}
    return StatefulDataLoader(items, batch_size=BATCH, transform=transform, **workers, **kwargs)


def rate(loader: object) -> tuple[float, float]:
    """(images/s, CPU ms per image of this process, all its threads) over one epoch."""
    t0, c0 = time.perf_counter(), time.process_time()
    n = sum(len(b) for b in loader)  # type: ignore[attr-defined]
    return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e3 / n


def one_row(args: argparse.Namespace) -> None:
    """In the child process: one row's warm-up and timed epochs, printed as one line of rates."""
    if args.threads:
        torch.set_num_threads(args.threads)
    items = pickle.loads(Path(args.items).read_bytes())
    loader = make_loader(ROWS[args.row], items, args.collate)
    torch.ones(1 << 22).add_(1)  # the main thread's intra-op threads, as a training step starts them
    rate(loader)  # warm-up
    print(" ".join(f"{r:.1f},{c:.3f}" for r, c in (rate(loader) for _ in range(args.epochs))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--collate", choices=["default", "image", "both"], default="both")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads(N) first (the user-code workaround)")
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--items", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:
        return one_row(args)
    threads = args.threads or torch.get_num_threads()
    print(f"# {machine()}, torch threads {threads}, load average {os.getloadavg()[0]:.1f}, {args.images} JPEGs, "
          f"batch {BATCH}, median of {args.epochs} epochs, each row in a fresh process (images/s)")
    with tempfile.TemporaryDirectory(prefix="bench_main_thread_") as tmp:
        items = Path(tmp) / "items.pickle"
        items.write_bytes(pickle.dumps(make_jpegs(args.images)))
        for collate in ["default", "image"] if args.collate == "both" else [args.collate]:
            print("Decode, RandomResizedCrop(224), RandomHorizontalFlip, "
                  + ("ToFloat, Normalize, ToChw, default collate" if collate == "default"
                     else "ImageCollator(normalize=)"))
            medians = {}
            for row, name in enumerate(ROWS):
                cmd = [sys.executable, __file__, "--row", str(row), "--items", str(items), "--collate", collate,
                       "--epochs", str(args.epochs)] + (["--threads", str(args.threads)] if args.threads else [])
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
                runs = [float(x.split(",")[0]) for x in out]
                cpu = statistics.median(float(x.split(",")[1]) for x in out)
                medians[name] = statistics.median(runs)
                print(f"  {name:34s} {medians[name]:7.0f}   (epochs: {', '.join(f'{x:.0f}' for x in runs)}; "
                      f"CPU {cpu:.2f} ms/image)")
            ratio = medians[ROWS[0]] / medians[ROWS[1]]
            print(f"  num_workers=0 / 1 worker thread: {ratio:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
