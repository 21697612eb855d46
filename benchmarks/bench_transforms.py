"""Image pipelines (issue 5), one run, ratios printed.

PNG set: 2,000 generated PNG images of up to 224 x 224; Decode, ToRgb, PadTo(224, 224), ToFloat, Normalize, ToChw,
ImageCollator, batch 64. JPEG set: 2,000 generated JPEG images of 256-400 px with Resize(224) then CenterCrop(224).
torch_drt with 2 worker threads (``worker_method="thread"``; the default is torch's processes) and with 0 workers,
against torch's DataLoader with 2 persistent worker processes
running the same steps with Pillow and torchvision; the three loaders' epochs are interleaved (one of each per
round, after a warm-up round) and the figures are medians.

    python benchmarks/bench_transforms.py [--images 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image as P
from torch.utils.data import DataLoader
from torchvision import transforms as TV

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved_times, machine, median_time

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_images(n: int, fmt: str, lo: int, hi: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        w, h = (int(x) for x in rng.integers(lo, hi + 1, 2))
        base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        arr = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:h, :w]  # blocks: compressible like photos
        arr = (arr.astype(np.int16) + rng.integers(-8, 8, arr.shape)).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        P.fromarray(arr).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        out.append(buf.getvalue())
    return out


class PilPng:
    """The reference steps with Pillow and torchvision: decode, RGB, pad right/bottom, ToTensor, Normalize."""

    def __init__(self, data):
        self.data = data
        self.norm = TV.Normalize(MEAN, STD)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        t = TV.functional.to_tensor(P.open(io.BytesIO(self.data[i])).convert("RGB"))
        t = TV.functional.pad(t, [0, 0, 224 - t.shape[2], 224 - t.shape[1]])
        return self.norm(t)


class PilJpeg(PilPng):
    def __init__(self, data):
        super().__init__(data)
        self.resize = TV.Compose([TV.Resize(224), TV.CenterCrop(224), TV.ToTensor(), TV.Normalize(MEAN, STD)])

    def __getitem__(self, i):
        return self.resize(P.open(io.BytesIO(self.data[i])).convert("RGB"))


def drain(loader, cpu: list[float] | None = None):
    """One epoch of ``loader``; with ``cpu``, this process's CPU seconds for it are appended (threads included)."""

    def epoch() -> int:
        t0 = time.process_time()
        n = sum(len(b) for b in loader)
        if cpu is not None:
            cpu.append(time.process_time() - t0)
        return n

    return epoch


def run(name, data, ours, reference, repeats):
    """torch_drt at 0 workers and 2 worker threads and torch's DataLoader at 2 processes, epochs interleaved,
    medians; the CPU time of torch_drt's runs too (this process: the loader's threads are in it)."""
    loaders = {
        f"drt_{workers}": StatefulDataLoader(
            data,
            batch_size=64,
            num_workers=workers,
            transform=ours,
            collate_fn=ImageCollator(buffers=8),
            prefetch_depth=2,
            **({"worker_method": "thread"} if workers else {}),  # the default is torch's worker processes
        )
        for workers in (0, 2)
    }
    loaders["torch_2"] = DataLoader(reference(data), batch_size=64, num_workers=2, persistent_workers=True)
    cpu: dict[str, list[float]] = {k: [] for k in loaders if k.startswith("drt")}
    times = interleaved_times({k: drain(loader, cpu.get(k)) for k, loader in loaders.items()}, repeats)
    figures = {k: len(data) / t for k, t in times.items()}
    figures |= {f"{k}_cpu_us": statistics.median(v[-repeats:]) / len(data) * 1e6 for k, v in cpu.items()}
    print(f"\n## {name} (images/s)")
    print(f"torch DataLoader, 2 processes (Pillow + torchvision): {figures['torch_2']:8.0f}")
    print(f"torch_drt, 0 workers:                                {figures['drt_0']:8.0f}   "
          f"CPU {figures['drt_0_cpu_us']:.0f} us per image")
    print(
        f"torch_drt, 2 worker threads:                         {figures['drt_2']:8.0f}   "
        f"{figures['drt_2'] / figures['torch_2']:.2f}x torch (target >= 1.5x), "
        f"{figures['drt_2'] / figures['drt_0']:.2f}x 0 workers (target >= 1.6x), "
        f"CPU {figures['drt_2_cpu_us']:.0f} us per image"
    )
    return figures


def scaling(data, pipeline, repeats) -> dict:
    """PNG images/s against the worker count: torch_drt threads and torch's processes."""
    out = {"workers": [0, 1, 2, 4], "torch_drt": [], "torch": []}
    for workers in out["workers"]:
        ours = StatefulDataLoader(
            data, batch_size=64, num_workers=workers, transform=pipeline, collate_fn=ImageCollator(buffers=8),
            **({"worker_method": "thread"} if workers else {}),
        )
        out["torch_drt"].append(len(data) / median_time(drain(ours), repeats))
        theirs = DataLoader(PilPng(data), batch_size=64, num_workers=workers, persistent_workers=workers > 0)
        out["torch"].append(len(data) / median_time(drain(theirs), repeats))
    print(
        "\n## PNG images/s by worker count: "
        + ", ".join(
            f"{w}: torch_drt {a:.0f} / torch {b:.0f}" for w, a, b in zip(out["workers"], out["torch_drt"], out["torch"])
        )
    )
    return out


def png_decode_cost(data: list[bytes], repeats: int) -> dict:
    """Decode's PNG path (libpng through imagecodecs, crash-safe; Pillow for the kinds it converts) against
    torchvision's ``decode_png`` (libpng; it crashes the interpreter on corrupt image data, so Decode does not use
    it), valid files only, interleaved, medians, single thread, in microseconds per image."""
    import warnings

    from torchvision.io import ImageReadMode, decode_png

    decode = T.Decode()

    def pillow() -> None:
        for d in data:
            decode(d)

    def libpng() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for d in data:
                decode_png(torch.frombuffer(bytearray(d), dtype=torch.uint8), mode=ImageReadMode.UNCHANGED)

    runs: dict[str, list[float]] = {"pillow": [], "libpng": []}
    pillow(), libpng()
    for _ in range(max(repeats, 5)):
        for name, fn in (("pillow", pillow), ("libpng", libpng)):
            t0 = time.perf_counter()
            fn()
            runs[name].append((time.perf_counter() - t0) / len(data) * 1e6)
    out = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"\n## PNG decode, one thread (us per image): Decode {out['pillow']:.0f}, torchvision decode_png "
        f"(libpng, unsafe on corrupt data) {out['libpng']:.0f}: {out['pillow'] / out['libpng']:.2f}x its time"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--scaling", action="store_true", help="also measure PNG throughput at 0, 1, 2, 4 workers")
    args = parser.parse_args()
    results: dict = {}
    torch.set_num_threads(1)  # the loader's threads are the parallelism; keep torch kernels single-threaded
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# image pipelines on {machine()}, median of {args.repeats}, load average {load} at the start")
    png = make_images(args.images, "PNG", 96, 224)
    pipeline = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(224, 224), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])
    results["png"] = run("PNG up to 224x224, pad to 224", png, pipeline, PilPng, args.repeats)
    results["png_decode"] = png_decode_cost(png[:500], args.repeats)
    if args.scaling:
        results["scaling"] = scaling(png, pipeline, args.repeats)
    jpeg = make_images(args.images, "JPEG", 256, 400)
    pipeline = T.Compose(
        [T.Decode(), T.ToRgb(), T.Resize(224), T.CenterCrop(224), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]
    )
    results["jpeg"] = run("JPEG 256-400 px, Resize(224) + CenterCrop(224)", jpeg, pipeline, PilJpeg, args.repeats)
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
