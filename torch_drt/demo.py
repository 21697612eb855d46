"""The main job: generate a labelled image set, cache it, read it back and report throughput."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

import torch_drt as drt

__all__ = ["ShapesSource", "run_demo"]

CLASSES = ("square", "disc", "stripes", "cross")


def render(label: int, rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """Draw one RGB image of class ``label`` on a noisy background."""
    img = rng.integers(0, 64, (size, size, 3), dtype=np.uint8)
    colour = rng.integers(128, 256, 3, dtype=np.uint8)
    yy, xx = np.mgrid[:size, :size]
    c, r = rng.integers(size // 3, 2 * size // 3, 2), rng.integers(size // 6, size // 3)
    if label == 0:
        mask = (abs(yy - c[0]) < r) & (abs(xx - c[1]) < r)
    elif label == 1:
        mask = (yy - c[0]) ** 2 + (xx - c[1]) ** 2 < r * r
    elif label == 2:
        mask = (yy // 3) % 2 == 0
    else:
        mask = (abs(yy - c[0]) < 2) | (abs(xx - c[1]) < 2)
    img[mask] = colour
    return img


class ShapesSource:
    """A generated, labelled PNG image set: a cache source (``name`` and ``__iter__`` of ``CacheInput``)."""

    def __init__(self, n: int, seed: int = 0, name: str = "shapes") -> None:
        self.name = name
        self.n = n
        self.seed = seed

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[drt.CacheInput]:
        from PIL import Image

        rng = np.random.default_rng(self.seed)
        for i in range(self.n):
            label = int(rng.integers(len(CLASSES)))
            buf = io.BytesIO()
            Image.fromarray(render(label, rng)).save(buf, format="PNG")
            yield drt.CacheInput(buf.getvalue(), {"label": label, "class_name": CLASSES[label], "index": i})


def run_demo(workdir: Path, n: int = 4000, batch_size: int = 256) -> dict[str, float]:
    """Build (or reuse) the demo cache under ``workdir`` and read it back; print what happens.

    Returns:
        The measured figures (samples/s of the sequential and shuffled reads).
    """
    from PIL import Image

    print(f"torch_drt demo: {n} generated 32x32 PNG images in {len(CLASSES)} classes, cache root {workdir}")
    runtime = drt.DatasetRuntime(num_workers=2)
    t0 = time.perf_counter()
    result = runtime.from_cache_sources(
        ShapesSource(n),
        workdir,
        reader_config=drt.ReaderConfig(seed=0, shuffle=False),
        writer_config=drt.WriterConfig(show_progress=True),
    )
    if not isinstance(result, drt.CacheSourcesDatasetSuccess):
        raise SystemExit(f"cache build failed: {result}")
    dataset = result.dataset
    layout = dataset.layouts[0]
    size = sum(s for _, s in layout.shards)
    print(
        f"cache ready in {time.perf_counter() - t0:.2f}s: {layout.sample_count} samples, {size / 1e6:.1f} MB, "
        f"{len(layout.shards)} shard(s), schema {dict(layout.schema)}"
    )
    labels = dataset.get_metadata().column("label").to_numpy()
    print("class counts:", {CLASSES[k]: int((labels == k).sum()) for k in range(len(CLASSES))})

    figures = {}
    t0 = time.perf_counter()
    total = sum(len(b) for b in dataset.iter_batches(batch_size))
    figures["sequential_read"] = total / (time.perf_counter() - t0)
    print(f"sequential read of {total} samples: {figures['sequential_read']:,.0f} samples/s")

    t0 = time.perf_counter()
    decoded = 0
    for batch in dataset.iter_batches(batch_size):
        images = np.stack([np.asarray(Image.open(io.BytesIO(d))) for d in batch.data])
        decoded += len(images)
    figures["read_and_decode"] = decoded / (time.perf_counter() - t0)
    print(f"read + PNG decode into {images.shape[1:]} uint8 arrays: {figures['read_and_decode']:,.0f} samples/s")

    # Steer sampling through the metadata table: up-weight one class, without touching the cache.
    table = dataset.get_metadata()
    weights = np.where(table.column("label").to_numpy() == 1, 4.0, 1.0)

    dataset.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array(weights)))
    shuffled = runtime.cached_dataset([layout.path], reader_config=drt.ReaderConfig(seed=1, shuffle=True))
    shuffled.update_metadata(dataset.get_metadata())
    t0 = time.perf_counter()
    drawn = np.concatenate([b.metadata.column("label").to_numpy() for b in shuffled.iter_batches(batch_size)])
    figures["weighted_read"] = len(drawn) / (time.perf_counter() - t0)
    share = float((drawn == 1).mean())
    print(
        f"weighted draw (class 'disc' x4): {figures['weighted_read']:,.0f} samples/s, "
        f"'disc' share {share:.2f} (expected about {4 / 7:.2f})"
    )
    return figures
