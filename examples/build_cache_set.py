"""Build a cache set of images on a local Ray cluster, resume a build that failed, and read the set.

Run: python examples/build_cache_set.py [WORKDIR]

Every image is made in memory (offline): the rows carry a seed, and the row function draws the image, resizes it
to 32 x 32 and encodes it as JPEG on the Ray workers. The first build of the second set meets a broken row; the
rerun after the fix reuses the parts already published and writes only the broken one.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray
from PIL import Image

import torch_drt as drt
from torch_drt.ray import build_cache_set


def to_image(row: dict[str, Any]) -> drt.CacheInput:
    """Draw, resize and encode one image (runs on the Ray workers)."""
    seed = row["id"]
    image = Image.new("RGB", (48 + seed % 16, 40), (seed * 7 % 256, seed * 13 % 256, 128))
    out = io.BytesIO()
    image.resize((32, 32)).save(out, "JPEG", quality=90)
    return drt.CacheInput(out.getvalue(), {"label": seed % 10})


class BrokenAt:
    """Like ``to_image``, but row ``bad`` cannot be decoded."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __call__(self, row: dict[str, Any]) -> drt.CacheInput:
        if row["id"] == self.bad:
            raise ValueError("truncated JPEG")
        return to_image(row)


def main(root: Path) -> None:
    quiet = drt.WriterConfig(show_progress=False)
    report = build_cache_set(ray.data.range(600), root, "images", fn=to_image, rows_per_part=150, writer_config=quiet)
    print(report.summary())

    failed = build_cache_set(ray.data.range(600), root, "retry", fn=BrokenAt(321), rows_per_part=150,
                             writer_config=quiet)
    print(f"first run: {failed.failures[0]}")
    fixed = build_cache_set(ray.data.range(600), root, "retry", fn=to_image, rows_per_part=150, writer_config=quiet)
    print("rerun: " + ", ".join(f"{p.name} {p.status}" for p in fixed.parts))

    runtime = drt.DatasetRuntime(num_workers=2)
    dataset = runtime.cached_dataset([root / "images"], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    first = next(iter(dataset))
    size = Image.open(io.BytesIO(first.data)).size
    print(f"set images: {len(dataset)} samples in {len(dataset.layouts)} parts; first is {size} label {first.metadata}")


if __name__ == "__main__":
    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="torch_drt_build_"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        main(workdir)
    finally:
        ray.shutdown()
