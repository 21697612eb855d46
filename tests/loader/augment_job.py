"""Augmented images per (epoch, index) from a torch_drt loader: shared by the determinism tests and their ranks."""

from __future__ import annotations

import io
import os

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T

SEED = 11


def jpeg(i: int) -> bytes:
    """A small JPEG of its own size and content."""
    rng = np.random.default_rng(i)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (20 + i % 7, 24 + i % 5, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


DATA = [jpeg(i) for i in range(26)]


def augment() -> T.Compose:
    return T.Compose([
        T.Decode(),
        T.RandomResizedCrop(12),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4),
        T.RandomGrayscale(0.3),
        T.RandomErasing(0.5),
    ])


class Collate:
    """ImageCollator, except that a padded rank's empty batch stays ``[]`` (ImageCollator refuses it)."""

    def __init__(self) -> None:
        self.images = ImageCollator()

    def __call__(self, items: list) -> object:
        return self.images(items) if items else []


def loader(**kwargs) -> StatefulDataLoader:
    return StatefulDataLoader(DATA, shuffle=True, seed=SEED, transform=augment(), collate_fn=Collate(),
                              return_indices=True, **kwargs)


def collect(batches, epoch: int, out: dict) -> dict:
    """Record each augmented image of ``batches`` under ``(epoch, index)``."""
    for images, indices in batches:
        for image, index in zip(images, indices):
            key = (epoch, int(index))
            assert key not in out, f"{key} delivered twice"
            out[key] = image.clone()
    return out


def epochs(n: int = 2, **kwargs) -> dict:
    """``n`` whole epochs of ``loader(**kwargs)``."""
    it = loader(**kwargs)
    out: dict = {}
    for epoch in range(n):
        collect(it, epoch, out)
    it.close()
    return out


def rank_job(rank: int, world_size: int, port: int, out: str) -> None:
    """One rank of a real gloo group: two epochs, rank and world size from the process group."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        it = loader(batch_size=3, num_workers=2, worker_method="thread", split_by_rank=True)
        assert (it.rank, it.world_size) == (rank, world_size)
        seen: dict = {}
        for epoch in range(2):
            collect(it, epoch, seen)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, seen)
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()
