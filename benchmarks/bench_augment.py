"""Augmentation pipeline (issue 12): torch_drt on 2 threads against torchvision v2 on torch's DataLoader, 2 processes.

The same JPEG files (generated once, photo-like sizes 400-640 x 300-480) and the same steps on both sides: decode
(libjpeg-turbo), RandomResizedCrop(224), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), to float32 and
Normalize, batches of 64 (torch_drt converts and normalises in its collator, straight into the batch).
torchvision's side is the pipeline its documentation recommends for speed: file bytes,
``torchvision.io.decode_jpeg``, v2 transforms on tensors, ``ToDtype(float32, scale=True)``, ``Normalize``.
Runs are interleaved; the figures are medians. Before timing, the script checks that both pipelines give the same
values from the same seed (outside the loaders, where both draw from torch's global generator).

    python benchmarks/bench_augment.py [--images 2000] [--repeats 5] [--workers 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image as P
from torch.utils.data import DataLoader, Dataset
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from torch_drt import FileDataset, ImageCollator, StatefulDataLoader
from torch_drt import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 64


def write_jpegs(directory: Path, n: int) -> list[str]:
    """``n`` photo-like JPEG files (smooth regions, edges and noise), quality 90."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        w, h = int(rng.integers(400, 641)), int(rng.integers(300, 481))
        base = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        arr = np.asarray(P.fromarray(base).resize((w, h), P.BICUBIC))
        arr = (arr.astype(np.int16) + rng.integers(-6, 7, arr.shape)).clip(0, 255).astype(np.uint8)
        path = directory / f"{i:05d}.jpg"
        P.fromarray(arr).save(path, format="JPEG", quality=90)
        paths.append(str(path))
    return paths


def ours() -> T.Compose:
    """Decode and the random steps per item; ToFloat + Normalize happen in the collator (``normalize=``), which
    writes each image's normalised values straight into the batch."""
    return T.Compose([T.Decode(), T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4)])


def collator() -> ImageCollator:
    return ImageCollator(buffers=8, normalize=(MEAN, STD))


def theirs() -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


class TorchvisionFiles(Dataset):
    """File bytes, ``decode_jpeg``, torchvision v2 transforms on the tensor."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.transform = theirs()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.paths[i], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        return self.transform(decode_jpeg(data))


def check_values(paths: list[str], seeds: int = 20) -> float:
    """The largest difference between the two pipelines over ``seeds`` seeded runs (ToFloat divides by 255,
    ToDtype multiplies by 1/255: the two differ by float32 rounding only)."""
    worst = 0.0
    mine, collate, reference = ours(), collator(), theirs()
    for s in range(seeds):
        data = Path(paths[s % len(paths)]).read_bytes()
        torch.manual_seed(s)
        a = collate([mine(data)]).as_subclass(torch.Tensor)[0]
        torch.manual_seed(s)
        b = reference(decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))).as_subclass(torch.Tensor)
        if a.shape != b.shape:
            raise AssertionError(f"shapes differ: {tuple(a.shape)} and {tuple(b.shape)}")
        worst = max(worst, float((a - b).abs().max()))
    if worst > 1e-5:
        raise AssertionError(f"the pipelines differ by {worst}")
    return worst


def epoch_time(loader) -> float:
    t0 = time.perf_counter()
    n = sum(len(b) for b in loader)
    took = time.perf_counter() - t0
    return n / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    torch.set_num_threads(1)  # the workers are the parallelism (torch's processes do this; docs/augmentations.md)
    with tempfile.TemporaryDirectory(prefix="bench_augment_") as tmp:
        paths = write_jpegs(Path(tmp), args.images)
        worst = check_values(paths)
        # as a training script builds them: shuffled, persistent workers, the same arguments on both sides
        drt = StatefulDataLoader(FileDataset(paths), batch_size=BATCH, shuffle=True, num_workers=args.workers,
                                 persistent_workers=True, transform=ours(), collate_fn=collator(),
                                 worker_method="thread")
        drt_processes = StatefulDataLoader(FileDataset(paths), batch_size=BATCH, shuffle=True,
                                           num_workers=args.workers, persistent_workers=True, transform=ours(),
                                           collate_fn=collator())  # the default: torch's worker processes
        tv = DataLoader(TorchvisionFiles(paths), batch_size=BATCH, shuffle=True, num_workers=args.workers,
                        persistent_workers=True)
        loaders = {"torch_drt": drt, "torch_drt_processes": drt_processes, "torchvision": tv}
        figures: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():  # warm-up: workers started, files in the page cache
            epoch_time(loader)
        for _ in range(args.repeats):  # interleaved
            for name, loader in loaders.items():
                figures[name].append(epoch_time(loader))
        del tv, loaders
    result = {k: statistics.median(v) for k, v in figures.items()}
    result["ratio"] = result["torch_drt"] / result["torchvision"]
    result["ratio_processes"] = result["torch_drt_processes"] / result["torchvision"]
    result["max_difference"] = worst
    result["runs"] = figures
    print(f"# augmentation pipeline on {machine()}, {args.images} JPEGs, batch {BATCH}, median of {args.repeats}, "
          f"load average {load} at the start")
    print("decode, RandomResizedCrop(224), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), float32, Normalize")
    print(f"values: equal to torchvision v2 within {worst:.1e} from the same seed")
    print(f"torchvision v2 on torch DataLoader, {args.workers} processes: {result['torchvision']:8.0f} images/s")
    print(f"torch_drt StatefulDataLoader, {args.workers} processes (default): {result['torch_drt_processes']:8.0f} "
          f"images/s ({result['ratio_processes']:.2f}x torchvision, target >= 1x)")
    print(f"torch_drt StatefulDataLoader, {args.workers} threads:         {result['torch_drt']:8.0f} images/s")
    print(f"ratio: {result['ratio']:.2f}x (target >= 1.5x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
