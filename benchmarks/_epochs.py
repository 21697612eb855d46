"""Timing two epochs of a loader (stdlib only: shared by bench_remote.py and its peers side script)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["epochs"]


def epochs(make_loader: Callable[[], Any]) -> dict[str, float]:
    """Time to first batch (``make_loader()`` included) and samples/s of a cold epoch 1 and a warm epoch 2.

    The loader's batches must have ``shape[0]`` (tensors); epoch 2 iterates the same loader again.
    """
    t0 = time.perf_counter()
    loader = make_loader()
    it = iter(loader)
    first = next(it)
    ttfb = time.perf_counter() - t0
    count = first.shape[0] + sum(b.shape[0] for b in it)
    epoch1 = time.perf_counter() - t0
    t1 = time.perf_counter()
    count2 = sum(b.shape[0] for b in loader)
    epoch2 = time.perf_counter() - t1
    return {"ttfb": ttfb, "epoch1": count / epoch1, "epoch2": count2 / epoch2, "count": count}
