"""Batch-sampler mode: torch's ``batch_sampler`` decides this rank's batches (BatchSamplerPlanner + BatchFetcher)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch_drt._state_fields import MAX_COUNT, StateFields
from torch_drt.loader._fetch_stage import fetch_stage, map_fetcher
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.nodes.batch_sampler_planner import BatchSamplerPlanner
from torch_drt.nodes.ordered_map import OrderedMapper


class BatchSamplerMode(LoaderMode):
    """A map-style dataset batched by a user's batch sampler; checkpoint ``{version, epoch, batches, items,
    num_batches}``: the lists and items delivered in the epoch (a resume skips that many lists of a new iterator
    of the batch sampler, so it must yield the same lists again, as a seeded sampler does)."""

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = BatchSamplerPlanner.EPOCH_KEY
    BATCHES_KEY = BatchSamplerPlanner.BATCHES_KEY
    ITEMS_KEY = BatchSamplerPlanner.ITEMS_KEY
    NUM_BATCHES_KEY = "num_batches"
    AHEAD_KEY = BatchSamplerPlanner.AHEAD_KEY

    def __init__(self, loader: Any, batch_sampler: Iterable[Any]) -> None:
        self.batch_sampler = batch_sampler
        self.planner = BatchSamplerPlanner(batch_sampler, len(loader.dataset), loader.world_size, loader.rank)
        self.fetcher = map_fetcher(loader)
        self.mapper = fetch_stage(loader, self.planner, self.fetcher)

    def _length(self) -> int | None:
        return len(self.batch_sampler) if hasattr(self.batch_sampler, "__len__") else None  # type: ignore[arg-type]

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        self.fetcher.start(self.mapper.method)
        return {OrderedMapper.SOURCE_KEY: cursor or {self.EPOCH_KEY: epoch}}

    def at_end(self, cursor: Cursor) -> bool:
        n = self._length()
        return cursor is not None and n is not None and cursor.get(self.BATCHES_KEY, 0) >= n

    def num_batches(self) -> int:
        n = self._length()
        if n is None:
            raise TypeError("the number of batches needs a batch_sampler with __len__")
        return n

    def remaining(self, cursor: Cursor) -> int:
        done = (cursor.get(self.BATCHES_KEY, 0) + len(cursor.get(self.AHEAD_KEY, ()))) if cursor else 0
        return max(0, self.num_batches() - done)

    def items_per_epoch(self) -> int:
        raise TypeError("a batch_sampler's items per epoch are known only by iterating it")

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        cursor = cursor or {}
        ahead = {self.AHEAD_KEY: list(cursor[self.AHEAD_KEY])} if cursor.get(self.AHEAD_KEY) else {}
        return ahead | {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.BATCHES_KEY: cursor.get(self.BATCHES_KEY, 0),
            self.ITEMS_KEY: cursor.get(self.ITEMS_KEY, 0),
            self.NUM_BATCHES_KEY: self._length(),
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        fields, epoch = StateFields.envelope(
            state, "batch_sampler loader", (self.EPOCH_KEY, self.BATCHES_KEY), (self.VERSION_KEY, self.VERSION),
            (self.ITEMS_KEY, self.NUM_BATCHES_KEY)
        )
        n = self._length()
        saved = fields.optional_int(self.NUM_BATCHES_KEY, default=None)
        if saved is not None and n is not None and saved != n:
            raise ValueError(
                f"invalid loader state: num_batches={saved!r} was saved with a batch_sampler of another length; "
                f"this one has {n} batches"
            )
        batches = fields.int(self.BATCHES_KEY, high=n if n is not None else MAX_COUNT)
        items = fields.int(self.ITEMS_KEY, default=0)
        cursor = {self.EPOCH_KEY: epoch, self.BATCHES_KEY: batches, self.ITEMS_KEY: items}
        ahead = [] if fields.get(self.AHEAD_KEY) is None else fields.ints(
            self.AHEAD_KEY, ok=lambda b: b > batches, high=n - 1 if n is not None else MAX_COUNT,
            must="of later batch numbers",
        )
        return epoch, cursor | {self.AHEAD_KEY: ahead} if ahead else cursor

    def close(self) -> None:
        self.mapper.close()
        self.fetcher.close()
