"""Epoch budgets of the cache loader: global samples -> rank samples -> worker batches, and row spans.

dataset-rt's semantics: ``samples_per_epoch`` counts global samples. Each rank takes ``ceil(S / W)`` samples
(padding wraps around the population), or with ``drop_last`` ``floor(S / (W * B)) * B``; rank zero warns once
when the effective global budget differs from the requested one. A rank's whole batches are split among its
loading workers in contiguous runs and the tail batch goes to the last busy worker, so workers divide a budget.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

__all__ = ["RowSpan", "rank_budget", "row_span", "worker_batches"]


class RowSpan(NamedTuple):
    """A contiguous run ``[offset, offset + length)`` of active-table rows."""

    offset: int
    length: int


def rank_budget(samples: int, *, world_size: int, rank: int, batch_size: int, drop_last: bool) -> int:
    """Samples this rank takes per epoch; rank zero warns when the global budget had to change."""
    if samples < 1:
        raise ValueError(f"samples_per_epoch={samples} must be > 0")
    local = samples // (world_size * batch_size) * batch_size if drop_last else -(-samples // world_size)
    effective = local * world_size
    if effective != samples and rank == 0:
        action = "padded" if effective > samples else "discarded"
        warnings.warn(
            f"samples_per_epoch adjusted: requested {samples} global samples, effective {effective} "
            f"({local} per rank on {world_size} ranks); {action} {abs(effective - samples)} so that every rank "
            "takes the same number of batches",
            UserWarning,
            stacklevel=3,
        )
    return local


def row_span(count: int, *, parts: int, part: int) -> RowSpan:
    """Split ``count`` rows into ``parts`` contiguous spans; the first ``count % parts`` get one row more."""
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"part={part} must be in [0, parts={parts})")
    size, extra = divmod(count, parts)
    return RowSpan(part * size + min(part, extra), size + int(part < extra))


def worker_batches(samples: int, *, workers: int, batch_size: int) -> list[list[int]]:
    """The batch sizes each of ``workers`` consumers yields per pass for a rank budget of ``samples``."""
    batches, tail = divmod(samples, batch_size)
    workers = max(1, workers)
    active = min(workers, max(1, batches))
    plans = [[batch_size] * row_span(batches, parts=active, part=w).length for w in range(active)]
    if tail:
        plans[-1].append(tail)
    return plans + [[] for _ in range(workers - active)]
