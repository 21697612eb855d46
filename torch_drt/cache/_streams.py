"""ConsumerStreams: which snapshot rows each consumer of the cache loader reads at each position of its stream.

A consumer is a rank (torch_drt's datasets: one stream per rank, its batches dealt to the loading processes in
turn, so the rows do not depend on ``num_workers``) or a (rank, loading worker) pair (dataset-rt's, through
``torch_drt.compat.dataset_rt``). Consumer ``w`` of rank ``r`` (stream id ``r * consumers + w``) reads stream
position ``s`` as a row:

* sequential: the cyclic span ``(offset + s mod population) mod rows``;
* shuffled, ``sampling="permutation"`` (every row once per epoch): replicated, all consumers of all ranks share
  ``EpochPermutations(rows, seed)`` by contiguous blocks (a consumer's block starts at its first position in a
  pass over all ranks and consumers); split, each consumer walks a permutation per epoch of its span of a keyed
  permutation of the rows;
* shuffled, ``sampling="weighted"``: a draw by weight with replacement from ``WeightedDraws(weights, seed,
  stream=id)`` over the whole table (replicate) or over its span of a keyed permutation of the rows (split);
* with ``shard_window``: the locality-aware exact shuffle of ``torch_drt.cache.shard_order``. Replicated, all
  consumers of all ranks share one order by contiguous blocks (mirrored in odd passes), so every row comes once
  per pass and each consumer reads its own few shards; split, each consumer reads its contiguous span of rows
  (not a permutation's span: locality is the point) in an order of its own.

Each consumer's stream is built on its first use in a process; a row is a pure function of the settings and ``s``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from torch_drt.cache._snapshot import Snapshot
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.shard_order import EpochPermutations, ShardWindowOrder, shard_window_order
from torch_drt.sampling._counter import derive_key
from torch_drt.sampling.budget import ConsumerPlan, first_positions
from torch_drt.sampling.permutation import KeyedPermutation
from torch_drt.sampling.weighted import WeightedDraws

__all__ = ["ConsumerStreams", "StreamSettings", "stream_id"]


def stream_id(plan: ConsumerPlan, consumers: int) -> int:
    """The draw stream of a consumer: ``rank * consumers + worker`` (``consumers``: per rank)."""
    return plan.rank * consumers + plan.worker


class StreamSettings(NamedTuple):
    """What makes the consumers' streams (besides their plans).

    Attributes:
        shuffle: a shuffled order instead of the sequential walk.
        seed: the sampling seed.
        partition: ``"split"`` or ``"replicate"``.
        shard_window: shards the locality-aware shuffle mixes at a time (None: ``sampling`` decides).
        world_size: ranks (a shared order spans all of them).
        sampling: ``"permutation"`` (every row once per epoch) or ``"weighted"`` (draws by weight with replacement).
    """

    shuffle: bool
    seed: int
    partition: str
    shard_window: int | None = None
    world_size: int = 1
    sampling: str = "permutation"


class ConsumerStreams:
    """The rows of a rank's consumers' streams over a mapped snapshot (see the module docstring).

    Args:
        plans: this rank's consumer plans.
        settings: the streams' settings.
        snapshot: the mapped metadata snapshot.
        reader: the caches' reader (the shard-window order groups rows by shard).
    """

    def __init__(
        self, plans: tuple[ConsumerPlan, ...], settings: StreamSettings, snapshot: Snapshot, reader: CacheReader
    ) -> None:
        self.plans, self.settings, self.snapshot, self.reader = plans, settings, snapshot, reader
        self._streams: dict[int, Any] = {}

    def _span(self, plan: ConsumerPlan) -> np.ndarray:
        rows = len(self.snapshot)
        return (plan.offset + np.arange(plan.population_size, dtype=np.int64)) % rows

    def _block(self, plan: ConsumerPlan) -> tuple[int, int, int, bool]:
        """A replicated consumer's (budget, offset, total, backward) in an order shared by blocks."""
        local = sum(p.sample_count for p in self.plans)
        consumer = plan.rank * len(self.plans) + plan.worker  # its number among all ranks' consumers
        return (plan.sample_count, first_positions(self.plans)[plan.worker], local * self.settings.world_size,
                consumer % 2 == 1)

    def _permutation(self, plan: ConsumerPlan) -> tuple[np.ndarray | None, Any]:
        settings, rows = self.settings, len(self.snapshot)  # equal weights: the loader checked its table
        if settings.partition == "replicate":
            budget, offset, total, _ = self._block(plan)
            return None, ShardWindowOrder(EpochPermutations(rows, settings.seed), budget, offset, total, mirror=False)
        population = KeyedPermutation(rows, settings.seed)(self._span(plan))
        key = derive_key(settings.seed, stream_id(plan, len(self.plans)))  # each span's epochs of its own
        return population, EpochPermutations(len(population), key)

    def _shard_window(self, plan: ConsumerPlan) -> tuple[np.ndarray | None, Any]:
        settings, snap = self.settings, self.snapshot  # equal weights: the loader checked its table when built
        if settings.partition == "replicate":
            block = self._block(plan)
            order = shard_window_order(
                self.reader,
                snap.cache_pos,
                snap.sample_ids,
                None,
                window=settings.shard_window,
                seed=settings.seed,
                block=block,
            )
            return None, order
        span = self._span(plan)
        order = shard_window_order(
            self.reader,
            snap.cache_pos[span],
            snap.sample_ids[span],
            None,
            window=settings.shard_window,
            seed=settings.seed,
        )
        return span, order

    def _build(self, worker: int) -> Any:
        plan, settings = self.plans[worker], self.settings
        if not settings.shuffle:
            return None
        if settings.shard_window is not None:
            return self._shard_window(plan)
        if settings.sampling == "permutation":
            return self._permutation(plan)
        stream = stream_id(plan, len(self.plans))
        if settings.partition == "replicate":
            return WeightedDraws.from_cumulative(self.snapshot.cum_weights, settings.seed, stream=stream)
        population = KeyedPermutation(len(self.snapshot), settings.seed)(self._span(plan))
        weights = np.diff(self.snapshot.cum_weights, prepend=0.0)[population]
        return population, WeightedDraws(weights, settings.seed, stream=stream)

    def rows(self, worker: int, start: int, count: int) -> np.ndarray:
        """The snapshot rows consumer ``worker`` reads at stream positions ``start .. start+count-1``."""
        if worker not in self._streams:
            self._streams[worker] = self._build(worker)
        stream = self._streams[worker]
        if stream is None:
            plan = self.plans[worker]
            s = np.arange(start, start + count, dtype=np.int64)
            return (plan.offset + s % plan.population_size) % len(self.snapshot)
        if isinstance(stream, WeightedDraws):
            return stream.draws(start, count)
        population, draws = stream
        local = draws.draws(start, count)
        return local if population is None else population[local]
