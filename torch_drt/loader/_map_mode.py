"""Map-style mode: positions -> this rank's indices (BatchPlanner) -> items, transform, collate (BatchFetcher)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torch_drt._state_fields import MAX_COUNT, StateFields
from torch_drt.loader._fetch import BatchFetcher
from torch_drt.loader._fetch_stage import fetch_stage, map_fetcher
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.nodes.batch_plan import BatchPlanner
from torch_drt.nodes.ordered_map import OrderedMapper
from torch_drt.sampling.partition import Partition
from torch_drt.sampling.samplers import IndexListSampler, PositionSampler, SequentialSampler, ShuffledSampler
from torch_drt.sampling.stride import world_total

if TYPE_CHECKING:
    from torch_drt.nodes._inline_loop import Countdown


def runs_inline(mapper: OrderedMapper, planner: BatchPlanner, fetcher: BatchFetcher) -> bool:
    """Whether batches load through ``mapper.inline_batches()``: 0 workers or ``adaptive`` threads (the loop maps
    cheap batches in the calling thread and takes the workers' through ``next()``), a batch fetched by one call
    (``fetcher.in_caller``), nothing told per batch (``plan_reads``)."""
    return (mapper.num_workers == 0 or mapper.adaptive) and planner.plan_reads is None and fetcher.in_caller


class MapMode(LoaderMode):
    """A map-style dataset's pipeline and checkpoint: ``{version, epoch, observation_offset, ...}``.

    ``observation_offset`` is the global position of the next global batch; ``num_samples`` the epoch's
    positions (a state of another size is refused); ``shuffle``, ``shuffle_seed`` (the loader's seed: the
    shuffle order and the items' random generators) and ``drop_last`` are the loader's settings. With
    ``in_order=False``, ``ahead`` lists the offsets of later global batches already delivered (skipped on
    resume; such a state resumes only with the same ``batch_size * world_size``).
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = BatchPlanner.EPOCH_KEY
    OFFSET_KEY = BatchPlanner.OFFSET_KEY
    SHUFFLE_KEY = "shuffle"
    SEED_KEY = "shuffle_seed"
    DROP_LAST_KEY = "drop_last"
    BATCH_SIZE_KEY = "batch_size"
    WORLD_SIZE_KEY = "world_size"
    NUM_SAMPLES_KEY = "num_samples"
    AHEAD_KEY = BatchPlanner.AHEAD_KEY

    def __init__(self, loader: Any, sampler: Iterable[int] | None, seed_given: bool) -> None:
        self.shuffle, self.seed, self.seed_given = loader.shuffle, loader.seed, seed_given
        self.drop_last, self.batch_size = loader.drop_last, loader.batch_size
        self.rank, self.world_size = loader.rank, loader.world_size
        n = len(loader.dataset)
        self.sampler: PositionSampler = (
            IndexListSampler(sampler, n)
            if sampler is not None
            else ShuffledSampler(n, self.seed)
            if self.shuffle
            else SequentialSampler(n)
        )
        self.planner = BatchPlanner(self.sampler, self.batch_size, self.world_size, self.rank, self.drop_last,
                                    plan_reads=getattr(loader.dataset, "plan_reads", None))
        self.fetcher = map_fetcher(loader)
        self.mapper = fetch_stage(loader, self.planner, self.fetcher)

    def next_fn(self, ticks: Countdown | None = None) -> Any:
        if runs_inline(self.mapper, self.planner, self.fetcher):
            return self.mapper.inline_batches(ticks).__next__
        return self.mapper.next

    def _partition(self) -> Partition:
        if self.sampler.n is None:
            raise TypeError("the number of batches needs a sampler with __len__")
        return Partition(self.sampler.n, self.batch_size, self.world_size, self.rank, self.drop_last)

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        self.fetcher.start(self.mapper.method)
        return {OrderedMapper.SOURCE_KEY: cursor or {self.EPOCH_KEY: epoch, self.OFFSET_KEY: 0}}

    def at_end(self, cursor: Cursor) -> bool:
        return (
            cursor is not None
            and self.sampler.n is not None
            and cursor[self.OFFSET_KEY] >= self._partition().end_offset
        )

    def remaining(self, cursor: Cursor) -> int:
        if not cursor:
            return self._partition().num_batches(0)
        return self._partition().num_batches(cursor[self.OFFSET_KEY]) - len(cursor.get(self.AHEAD_KEY, ()))

    def num_batches(self) -> int:
        return self._partition().num_batches(0)

    def items_per_epoch(self) -> int:
        return self._partition().items()

    def epoch_indices(self, epoch: int) -> Iterable[int]:
        if isinstance(self.sampler, IndexListSampler):
            raise TypeError("a user sampler is read once per epoch, by the loader")
        planner = BatchPlanner(self.sampler, self.batch_size, self.world_size, self.rank, self.drop_last)
        planner.reset({self.EPOCH_KEY: epoch, self.OFFSET_KEY: 0})
        return (i for plan in planner for i in plan.indices)

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        ahead = {self.AHEAD_KEY: list(cursor[self.AHEAD_KEY])} if cursor and cursor.get(self.AHEAD_KEY) else {}
        return ahead | {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.OFFSET_KEY: cursor[self.OFFSET_KEY] if cursor else 0,
            self.SHUFFLE_KEY: self.shuffle,
            self.SEED_KEY: self.seed,
            self.DROP_LAST_KEY: self.drop_last,
            self.BATCH_SIZE_KEY: self.batch_size,
            self.WORLD_SIZE_KEY: self.world_size,
            self.NUM_SAMPLES_KEY: self.sampler.n
            if not isinstance(self.sampler, IndexListSampler) or self.sampler.sized
            else None,
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        written = (self.NUM_SAMPLES_KEY, self.SHUFFLE_KEY, self.SEED_KEY, self.DROP_LAST_KEY, self.BATCH_SIZE_KEY,
                   self.WORLD_SIZE_KEY)
        fields, epoch = StateFields.envelope(
            state, "loader", (self.EPOCH_KEY, self.OFFSET_KEY), (self.VERSION_KEY, self.VERSION), written
        )
        n = self.sampler.n if not isinstance(self.sampler, IndexListSampler) or self.sampler.sized else None
        saved = fields.optional_int(self.NUM_SAMPLES_KEY, default=None)
        if saved is not None and n is not None and saved != n:
            raise ValueError(
                f"invalid loader state: num_samples={saved} was saved on an epoch of another size; "
                f"this loader has {n} positions per epoch"
            )
        offset = fields.int(self.OFFSET_KEY, high=n if n is not None else MAX_COUNT)
        seed = fields.seed(self.SEED_KEY)
        for key in (self.SHUFFLE_KEY, self.DROP_LAST_KEY):
            if fields.get(key) is not None:
                fields.bool(key)
        for key in (self.BATCH_SIZE_KEY, self.WORLD_SIZE_KEY):
            fields.int(key, low=1, default=1)
        ahead = self._parse_ahead(fields, offset, n)
        self._adopt(state, seed, epoch, offset)  # last: it may take the checkpoint's seed
        cursor = {self.EPOCH_KEY: epoch, self.OFFSET_KEY: offset}
        return epoch, cursor | {self.AHEAD_KEY: ahead} if ahead else cursor

    def _parse_ahead(self, fields: StateFields, offset: int, n: int | None) -> list[int]:
        """The ``ahead`` offsets of an ``in_order=False`` state: later global batches of this batch geometry."""
        if fields.get(self.AHEAD_KEY) is None:
            return []
        size, high = world_total(self.batch_size, world_size=self.world_size), n if n is not None else MAX_COUNT
        ahead = fields.ints(self.AHEAD_KEY, high=high)
        saved = world_total(fields.get(self.BATCH_SIZE_KEY, self.batch_size),
                            world_size=fields.get(self.WORLD_SIZE_KEY, self.world_size))
        if ahead and saved != size:
            raise ValueError(
                f"this checkpoint was taken with batches delivered out of order (in_order=False) and global batches "
                f"of {saved} samples: it resumes only with batch_size * world_size == {saved} (this loader: {size})"
            )
        fields.ints(self.AHEAD_KEY, ok=lambda o: o > offset and (o - offset) % size == 0, high=high,
                    must="of later global batches")
        return ahead

    def close(self) -> None:
        self.mapper.close()
        self.fetcher.close()

    def _adopt(self, state: Any, seed: int | None, epoch: int, offset: int) -> None:
        """A loader whose seed was drawn at random takes the checkpoint's; other differences are warned about."""
        if not self.seed_given and seed is not None and seed != self.seed:
            self.seed = self.fetcher.seed = seed
            if isinstance(self.sampler, ShuffledSampler):
                assert self.sampler.n is not None  # (a ShuffledSampler's n is its dataset size)
                self.sampler = self.planner.source = ShuffledSampler(self.sampler.n, seed)
            self.mapper.close()  # process workers hold the old seed: start new ones
        ours = {self.SHUFFLE_KEY: self.shuffle, self.SEED_KEY: self.seed, self.DROP_LAST_KEY: self.drop_last}
        differences = [
            f"{k}: checkpoint {state[k]!r}, loader {v!r}"
            for k, v in ours.items()
            if state.get(k) is not None and state[k] != v
        ]
        if differences:
            warnings.warn(
                "checkpoint settings differ; applied this loader's (" + "; ".join(differences) + f"), resuming at "
                f"epoch {epoch}, global offset {offset}",
                stacklevel=4,
            )
