"""CPU per image of the image benchmarks' pipelines, one thread (issue 26): where the time goes, load or not.

Thread CPU time (``time.thread_time``) rather than wall time, so other processes on a busy machine change the
figures less (they still do: caches and shared cores). For each pipeline of ``bench_transforms.py`` (PNG, JPEG)
and ``bench_augment.py`` (augmentation): the microseconds of each step over the same images, and of the collator
per image, medians of ``--repeats`` passes.

    python benchmarks/profile_images.py [--images 256] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine
from bench_augment import write_jpegs
from bench_transforms import MEAN, STD, make_images

from torch_drt import ImageCollator
from torch_drt import transforms as T


def pipelines(n: int, tmp: Path) -> dict:
    """name -> (encoded images, named steps, collator)."""
    pad = [("Decode", T.Decode()), ("ToRgb", T.ToRgb()),
           ("PadTo+ToFloat+Normalize+ToChw", T.Compose([T.PadTo(224, 224), T.ToFloat(), T.Normalize(MEAN, STD),
                                                        T.ToChw()]))]
    resize = [("Decode", T.Decode()), ("ToRgb", T.ToRgb()), ("Resize", T.Resize(224)),
              ("CenterCrop", T.CenterCrop(224)),
              ("ToFloat+Normalize+ToChw", T.Compose([T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]))]
    augment = [("Decode", T.Decode()), ("RandomResizedCrop", T.RandomResizedCrop(224)),
               ("RandomHorizontalFlip", T.RandomHorizontalFlip()), ("ColorJitter", T.ColorJitter(0.4, 0.4, 0.4))]
    return {
        "PNG (bench_transforms)": (make_images(n, "PNG", 96, 224), pad, ImageCollator(buffers=8)),
        "JPEG (bench_transforms)": (make_images(n, "JPEG", 256, 400), resize, ImageCollator(buffers=8)),
        "augmentation (bench_augment)": ([Path(p).read_bytes() for p in write_jpegs(tmp, n)], augment,
                                         ImageCollator(buffers=8, normalize=(MEAN, STD))),
    }


def one_pass(data: list[bytes], steps: list, collator: ImageCollator) -> dict[str, float]:
    """Microseconds per image of each step and of the collator, one pass."""
    spent = dict.fromkeys([name for name, _ in steps] + ["ImageCollator"], 0.0)
    images = []
    for x in data:
        for name, step in steps:
            t0 = time.thread_time()
            x = step(x)
            spent[name] += time.thread_time() - t0
        images.append(x)
    for i in range(0, len(images), 64):
        t0 = time.thread_time()
        batch = collator(images[i : i + 64])
        spent["ImageCollator"] += time.thread_time() - t0
        del batch
    return {k: v / len(data) * 1e6 for k, v in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# CPU per image, one thread, on {machine()}, median of {args.repeats}, load average {load} at the start")
    with tempfile.TemporaryDirectory(prefix="profile_images_") as tmp:
        for name, (data, steps, collator) in pipelines(args.images, Path(tmp)).items():
            one_pass(data, steps, collator)  # warm-up
            runs = [one_pass(data, steps, collator) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            parts = ", ".join(f"{k} {v:.0f}" for k, v in med.items())
            print(f"{name}: {sum(med.values()):.0f} us per image ({parts})")


if __name__ == "__main__":
    main()
