"""The main job: build a cache of generated images, train a small CNN from it, checkpoint mid-epoch, resume.

Run it with ``torch-drt demo`` (or ``make demo``). Every step prints what it did and what it measured.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import torch_drt as drt
from torch_drt.describe import described

__all__ = ["ShapesSource", "loader", "render", "run_demo"]

CLASSES = ("square", "disc", "stripes", "cross")
MEAN, STD = [0.25, 0.25, 0.25], [0.3, 0.3, 0.3]


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
        self.name, self.n, self.seed = name, n, seed

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

    def __repr__(self) -> str:
        return described(self, self.name, n=self.n, seed=self.seed)


class _WithLabel:
    """Loader transform: decode the PNG on a worker thread and pair it with its label (picklable)."""

    def __init__(self, labels: np.ndarray) -> None:
        from torch_drt import transforms as T

        self.labels = labels
        self.pipeline = T.Compose([T.Decode(), T.ToRgb(), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])

    def __call__(self, index: int, png: bytes) -> tuple[Any, int]:
        return self.pipeline(png), int(self.labels[index])


def _model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 64),
        nn.ReLU(),
        nn.Linear(64, len(CLASSES)),
    )


def _cache(workdir: Path, n: int, show_progress: bool) -> Any:
    """The demo cache of ``n`` images under ``workdir``: reused when complete, built otherwise."""
    try:
        return drt.DatasetRuntime(num_workers=2).from_cache_sources(
            ShapesSource(n),
            workdir,
            reader_config=drt.ReaderConfig(seed=0),
            writer_config=drt.WriterConfig(show_progress=show_progress),
        )
    except drt.CacheSourcesError as e:
        raise SystemExit(f"cache build failed: {e}") from None


def loader(workdir: str | Path | None = None, n: int = 4000, batch_size: int = 64, workers: int = 2) -> Any:
    """The demo's training loader over its cache (built when missing): ``torch-drt profile torch_drt.demo:loader``.

    Args:
        workdir: The cache root; default ``$TORCH_DRT_DEMO_DIR``, else ``demo_data`` (``torch-drt demo``'s).
        n: Generated images in the cache.
        batch_size: Images per batch.
        workers: Loader threads decoding and normalising the images.

    Returns:
        The ``StatefulDataLoader`` the demo trains from: ``((images, labels), indices)`` batches.
    """
    from torch_drt.storage import DocumentStorage

    dataset = _cache(Path(workdir or os.environ.get("TORCH_DRT_DEMO_DIR", "demo_data")), n, show_progress=False)
    labels = dataset.get_metadata().column("label").to_numpy()
    return _loader(DocumentStorage(dataset.layouts[0].path), labels, batch_size, workers)


def _loader(storage: Any, labels: np.ndarray, batch_size: int, workers: int) -> Any:
    from torch_drt import ImageCollator, StatefulDataLoader

    return StatefulDataLoader(
        storage,
        batch_size=batch_size,
        shuffle=True,
        seed=7,
        drop_last=True,
        num_workers=workers,
        worker_method="thread",  # torch_drt's opt-in speed-up: decode and augment on threads, one batch buffer
        transform=_WithLabel(labels),
        collate_fn=ImageCollator(buffers=4),
        return_indices=True,
    )


def _train(loader: Any, model: Any, optimizer: Any, steps: int, log: bool) -> tuple[list[list[int]], list[float]]:
    """Train ``steps`` steps over as many epochs as needed; return the batches' indices and the losses."""
    import torch

    seen: list[list[int]] = []
    losses: list[float] = []
    loss_fn = torch.nn.CrossEntropyLoss()
    while len(losses) < steps:
        for (images, labels), indices in loader:
            x, y = torch.from_dlpack(images), torch.as_tensor(labels)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            seen.append(indices)
            losses.append(loss.item())
            if log and len(losses) % 50 == 0:
                accuracy = float((model(x).argmax(1) == y).float().mean())
                state = loader.state_dict()
                print(
                    f"    step {len(losses):4d}  loss {loss:.3f}  batch accuracy {accuracy:.2f}  "
                    f"(epoch {state['epoch']}, offset {state['observation_offset']})"
                )
            if len(losses) == steps:
                break
    return seen, losses


def run_demo(workdir: Path, n: int = 4000, batch_size: int = 64, steps: int = 300, workers: int = 2) -> dict:
    """Build (or reuse) the demo cache under ``workdir``, train, checkpoint mid-epoch, resume; print each step.

    Returns:
        The measured figures (samples/s) and whether the resumed run matched the uninterrupted one.
    """
    import torch

    outer = torch.get_num_threads()
    torch.set_num_threads(1)  # the loader's threads and the training share two cores fairly
    try:
        return _demo(Path(workdir), n, batch_size, steps, workers)
    finally:
        torch.set_num_threads(outer)  # a process that called it (``main(["demo"])``) keeps its own setting


def _demo(workdir: Path, n: int, batch_size: int, steps: int, workers: int) -> dict:
    """``run_demo``'s steps (torch on one thread)."""
    import torch

    from torch_drt.storage import DocumentStorage

    print(f"torch_drt demo: {n} generated 32x32 PNG images in {len(CLASSES)} classes; cache root {workdir}\n")

    print("1. Build the cache (reused when it is already complete)")
    t0 = time.perf_counter()
    dataset = _cache(workdir, n, show_progress=True)
    layout = dataset.layouts[0]
    size = sum(s for _, s in layout.shards)
    print(
        f"   {layout.sample_count} samples, {size / 1e6:.1f} MB in {len(layout.shards)} shard(s), ready in "
        f"{time.perf_counter() - t0:.2f}s; metadata columns {dataset.get_metadata().column_names}"
    )
    labels = dataset.get_metadata().column("label").to_numpy()
    print("   class counts:", {CLASSES[k]: int((labels == k).sum()) for k in range(len(CLASSES))})
    t0 = time.perf_counter()
    read = sum(len(b) for b in dataset.iter_batches(256))
    figures = {"cache_read": read / (time.perf_counter() - t0)}
    print(f"   raw read of all samples: {figures['cache_read']:,.0f} samples/s\n")

    storage = DocumentStorage(layout.path)
    per_epoch = n // batch_size
    half = steps // 2 if (steps // 2) % per_epoch else steps // 2 + 7  # make the checkpoint fall mid-epoch
    print(
        f"2. Train a small CNN for {steps} steps (batch {batch_size}, {per_epoch} batches per epoch), decoding "
        f"and normalising on {workers} loader threads"
    )
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    t0 = time.perf_counter()
    seen_full, losses_full = _train(_loader(storage, labels, batch_size, workers), model, optimizer, steps, log=True)
    elapsed = time.perf_counter() - t0
    figures["training"] = steps * batch_size / elapsed
    print(f"   {steps} steps in {elapsed:.1f}s: {figures['training']:,.0f} samples/s through loader + model\n")

    print(f"3. Train again, stop at step {half} (mid-epoch) and save a checkpoint")
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = _loader(storage, labels, batch_size, workers)
    seen_a, losses_a = _train(loader, model, optimizer, half, log=False)
    checkpoint = workdir / "demo_checkpoint.pt"
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "loader": loader.state_dict()}, checkpoint
    )
    print(f"   loader state in the checkpoint: {loader.state_dict()}\n")
    loader.close()

    print("4. Resume from the checkpoint with a fresh model, optimizer and loader (and 1 worker thread instead of 2)")
    saved = torch.load(checkpoint, weights_only=True)
    model = _model()
    model.load_state_dict(saved["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer.load_state_dict(saved["optimizer"])
    loader = _loader(storage, labels, batch_size, workers=1)
    loader.load_state_dict(saved["loader"])
    seen_b, losses_b = _train(loader, model, optimizer, steps - half, log=False)
    same_batches = seen_a + seen_b == seen_full
    loss_gap = max(abs(a - b) for a, b in zip(losses_a + losses_b, losses_full))
    exact = same_batches and loss_gap == 0  # the same samples in the same order, and the same bytes in them
    print(
        f"   the resumed stream continues exactly where it stopped: {'yes' if same_batches else 'NO'} "
        f"({len(seen_b)} batches after the checkpoint, each the same samples in the same order)"
    )
    print(f"   losses of the interrupted + resumed run vs the uninterrupted run: max difference {loss_gap:.2e}")
    print(f"   final loss {losses_b[-1]:.3f} (first was {losses_full[0]:.3f})\n")

    print("5. Summary")
    print(
        f"   cache read {figures['cache_read']:,.0f} samples/s; training {figures['training']:,.0f} samples/s; "
        f"exact resume: {'yes' if exact else 'NO'}"
    )
    figures["exact_resume"] = exact
    return figures
