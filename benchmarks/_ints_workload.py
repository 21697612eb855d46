"""The 100,000-ints overhead workload (bench_loader.py, bench_stats_cost.py and the Python 3.13 side scripts): a
dataset whose items are their indices, batch 64, identity collate; the loaders built on it and a bare loop doing
the same work without a loader (the interpreter's own speed).

Stdlib-only at import, so the side interpreter (Python 3.13, dataloader-rs) imports it too: each loader's package
is imported where it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ITEMS, BATCH = 100_000, 64


class Ints:
    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int) -> int:
        return i


def identity(batch: Any) -> Any:
    return batch


def drain(loader: Any) -> Callable[[], int]:
    """One epoch of ``loader``, its batches counted."""
    return lambda: sum(1 for _ in loader)


def drt_loader(workers: int = 0, **kwargs: Any) -> Any:
    """torch_drt's ``StatefulDataLoader`` over the workload (``workers`` persistent, as torch's are benchmarked)."""
    from torch_drt import StatefulDataLoader

    if workers:
        kwargs = {"num_workers": workers, "persistent_workers": True, **kwargs}
    return StatefulDataLoader(Ints(), batch_size=BATCH, collate_fn=identity, **kwargs)


def torch_loader(workers: int = 0) -> Any:
    """torch's ``DataLoader`` over the workload."""
    from torch.utils.data import DataLoader

    two = {"num_workers": workers, "persistent_workers": True} if workers else {}
    return DataLoader(Ints(), batch_size=BATCH, collate_fn=identity, **two)


def rs_loader(workers: int = 0) -> Any:
    """dataloader-rs's ``PyDataloader`` over the workload (Python 3.13 only; its datasets derive from
    ``PyDataset``)."""
    from dataloader_rs import PyDataloader, PyDataset

    class RsInts(Ints, PyDataset):
        pass

    return PyDataloader(RsInts(), batch_size=BATCH, num_workers=workers, collate_fn=identity)


def bare_loop() -> int:
    """The workload's own work without a loader: each batch's items fetched in a comprehension, the batch
    collated. Timed on two interpreters, it shows how much of a cross-interpreter ratio is the interpreter."""
    ds, batches = Ints(), 0
    for start in range(0, ITEMS, BATCH):
        identity([ds[i] for i in range(start, min(start + BATCH, ITEMS))])
        batches += 1
    return batches
