"""Epoch budgets of the cache loader (dataset-rt 0.4.8's semantics), as arithmetic over a few integers.

``samples_per_epoch`` counts global samples. Each of W ranks takes ``ceil(S / W)`` samples (padding wraps around
the population), or with ``drop_last`` ``floor(S / (W * B)) * B``; rank zero warns once when the effective
global budget differs from the requested one. A rank's whole batches are split among its consumers (loading
workers) in contiguous runs and the tail batch goes to the last busy consumer, so consumers divide a budget.

Split partitions give each consumer a contiguous span of rows (rank spans, then consumer spans). When a pass
reads exactly the rank's span, each consumer's span is its own budget, so a sequential pass reads every row
once (plus the padding wrap); otherwise the rank span is split evenly and each consumer walks its span
cyclically. Replicated partitions let every consumer read the whole table. Memory is O(consumers).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Literal, NamedTuple

from torch_drt.sampling.stride import rank_offset, rank_share, world_total

MAX_SAMPLES = 1 << 53  # torch computes len(loader) through floating point, as dataset-rt notes


class RowSpan(NamedTuple):
    """A contiguous run ``[offset, offset + length)`` of rows (it may wrap past the table's end)."""

    offset: int
    length: int


class ConsumerPlan(NamedTuple):
    """What one consumer (rank, worker) reads per pass.

    Attributes:
        rank: the consumer's rank.
        worker: the consumer's worker within its rank.
        offset: the first row of its population (rows are taken modulo the table size).
        population_size: rows in its population (the whole table when replicated; 0 when idle).
        sample_count: samples it yields per pass (whole batches, plus the rank's tail batch on the last busy one).
    """

    rank: int
    worker: int
    offset: int
    population_size: int
    sample_count: int


def rank_budget(samples: int, *, world_size: int, rank: int, batch_size: int, drop_last: bool) -> int:
    """Samples this rank takes per pass; rank zero warns when the global budget had to change."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples_per_epoch={samples!r} must be an int in [1, {MAX_SAMPLES}]")
    if drop_last:
        local = rank_share(samples, world_size=world_size, multiple=batch_size, drop_last=True)
    else:
        local = rank_share(samples, world_size=world_size)
    effective = world_total(local, world_size=world_size)
    if effective != samples and rank == 0:
        action = "padded" if effective > samples else "discarded"
        warnings.warn(
            f"samples_per_epoch adjusted: requested {samples} global samples, effective {effective} "
            f"({local} per rank on {world_size} ranks); {action} {abs(effective - samples)} so that every rank "
            "takes the same number of batches",
            UserWarning,
            stacklevel=4,
        )
    return local


def row_span(count: int, *, parts: int, part: int) -> RowSpan:
    """Split ``count`` rows into ``parts`` contiguous spans; the first ``count % parts`` get one row more."""
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"part={part} must be in [0, parts={parts})")
    size, extra = divmod(count, parts)
    return RowSpan(part * size + min(part, extra), size + int(part < extra))


def _worker_budgets(samples: int, *, workers: int, populations: int, batch_size: int) -> list[int]:
    """Samples per consumer: whole batches in contiguous runs, the tail batch on the last busy consumer."""
    if samples == 0:
        return [0] * workers
    batches, tail = divmod(samples, batch_size)
    active = min(workers, populations, max(1, batches))
    budgets = [row_span(batches, parts=active, part=w).length * batch_size for w in range(active)]
    budgets[-1] += tail
    return budgets + [0] * (workers - active)


def consumer_plans(
    rows: int,
    *,
    samples: int,
    batch_size: int,
    workers: int,
    world_size: int,
    rank: int,
    partition: Literal["split", "replicate"],
    drop_last: bool,
) -> tuple[ConsumerPlan, ...]:
    """The plans of this rank's ``max(1, workers)`` consumers over a table of ``rows`` rows.

    Raises:
        ValueError: for an empty table or a budget outside ``[1, MAX_SAMPLES]``.
    """
    if rows < 1:
        raise ValueError("the metadata table has no rows: nothing to load")
    local = rank_budget(samples, world_size=world_size, rank=rank, batch_size=batch_size, drop_last=drop_last)
    workers = max(1, workers)
    if partition == "replicate":
        span, populations = RowSpan(0, rows), workers
    else:
        population = rows
        if samples == rows:
            population = world_total(local, world_size=world_size)  # the padded pass: the padding wraps
        elif rows < world_size:
            population = world_total(rank_share(rows, world_size=world_size), world_size=world_size)
        span = row_span(population, parts=world_size, part=rank)
        populations = span.length
    budgets = _worker_budgets(local, workers=workers, populations=populations, batch_size=batch_size)
    active = sum(budget > 0 for budget in budgets)
    full_pass = sum(budgets) == span.length
    plans, offset = [], span.offset
    for worker, budget in enumerate(budgets):
        if budget == 0:
            size = 0
        elif partition == "replicate":
            size = rows
        elif full_pass:
            size = budget
        else:
            size = row_span(span.length, parts=active, part=worker).length
        plans.append(ConsumerPlan(rank, worker, 0 if partition == "replicate" else offset, size, budget))
        offset += size
    return tuple(plans)


def batch_counts(plans: tuple[ConsumerPlan, ...], batch_size: int) -> list[int]:
    """Batches each consumer yields per pass (its last may be short)."""
    return [-(-plan.sample_count // batch_size) for plan in plans]


def first_positions(plans: tuple[ConsumerPlan, ...]) -> list[int]:
    """Each consumer's first position in a pass, counted over all ranks' consumers (a rank's items are contiguous:
    every rank takes the same budget)."""
    local = sum(plan.sample_count for plan in plans)
    out, position = [], rank_offset(plans[0].rank, per_rank=local) if plans else 0
    for plan in plans:
        out.append(position)
        position += plan.sample_count
    return out


def interleave(counts: list[int], done: int = 0) -> Iterator[tuple[int, int]]:
    """``(consumer, batch number)`` in torch's delivery order, from the ``done``-th batch of a pass on.

    torch's loader takes one batch from each consumer in turn and skips consumers that are exhausted. Resuming at
    ``done`` costs O(consumers x log(batches)).
    """
    rounds = max(counts, default=0)
    lo, hi = 0, rounds  # the round holding batch `done`: the last r with sum(min(c, r)) <= done
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in counts) <= done:
            lo = mid
        else:
            hi = mid - 1
    skip = done - sum(min(c, lo) for c in counts)
    for r in range(lo, rounds):
        for consumer, count in enumerate(counts):
            if count > r:
                if skip:
                    skip -= 1
                    continue
                yield consumer, r
