"""The build benchmark's inputs: JPEGs of 256-400 px (gradients and noise), written once by worker processes."""

from __future__ import annotations

from multiprocessing import get_context
from pathlib import Path


def _make_image(job: tuple[str, int]) -> None:
    import numpy as np
    from PIL import Image

    directory, i = job
    rng = np.random.default_rng(i)
    h, w = (int(x) for x in rng.integers(256, 401, 2))
    ys, xs = np.mgrid[0:h, 0:w]
    base = np.stack([(xs * (1 + i % 3)) % 256, (ys * (1 + i % 5)) % 256, (xs + ys + i) % 256], axis=-1)
    noisy = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(noisy).save(f"{directory}/img_{i:06d}.jpg", quality=90)


def make_images(directory: Path, n: int, workers: int = 2) -> list[str]:
    """Write ``n`` JPEGs (256-400 px, gradients and noise) once; return their paths in order."""
    directory.mkdir(parents=True, exist_ok=True)
    todo = [(str(directory), i) for i in range(n) if not (directory / f"img_{i:06d}.jpg").exists()]
    with get_context("fork").Pool(workers) as pool:
        pool.map(_make_image, todo, chunksize=64)
    return [str(directory / f"img_{i:06d}.jpg") for i in range(n)]
