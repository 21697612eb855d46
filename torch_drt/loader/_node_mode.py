"""Node mode: a torchdata node's items in its own order, batched (ItemBatcher), transformed and collated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdata.nodes import BaseNode

from torch_drt._state_fields import StateFields
from torch_drt.loader._fetch_stage import fetch_stage, pins_in_fetch
from torch_drt.loader._item_fetch import ItemBatchFetcher
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.nodes.item_batcher import ItemBatcher
from torch_drt.nodes.ordered_map import OrderedMapper


class NodeMode(LoaderMode):
    """A node's pipeline and checkpoint: ``{version, epoch, node_state, position, batch_size}``.

    ``node_state`` is the batcher's state after the last delivered batch (the node's own state inside it). At
    the end of an epoch it is the node's state there, marked ``next_epoch``: the next epoch restores it and then
    starts the node's next epoch (``reset(state)``, ``reset(None)``, as torchdata's ``Loader``), so a checkpoint
    taken exactly at an epoch's end resumes the node's own epoch count. None (a fresh loader) starts from the
    node's own ``reset()``. ``position`` repeats the items of the epoch delivered (0 at an epoch's start), so a
    ``node_state`` of None in a later state is refused (states from before it lack it). Items have no dataset
    index: ``transform`` and ``return_indices`` get their positions in the node's epoch (times ``stride`` plus
    ``offset``: an IterableDataset numbers them per rank). The node decides order, shuffling and rank striding.
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = "epoch"
    NODE_KEY = "node_state"
    BATCH_SIZE_KEY = "batch_size"
    POSITION_KEY = "position"

    def __init__(self, loader: Any, node: BaseNode, stride: int = 1, offset: int = 0) -> None:
        self.node, self.batch_size, self.drop_last = node, loader.batch_size, loader.drop_last
        self.batcher = ItemBatcher(node, loader.batch_size, loader.drop_last)
        fetcher = ItemBatchFetcher(
            loader.transform,
            loader._collate,
            pin=pins_in_fetch(loader),
            seed=loader.seed,
            stride=stride,
            offset=offset,
        )
        self.mapper = fetch_stage(loader, self.batcher, fetcher)

    def carry(self, cursor: Cursor) -> Cursor:
        return ItemBatcher.next_epoch(cursor)

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any] | None:
        self.batcher.epoch = epoch
        return None if cursor is None else {OrderedMapper.SOURCE_KEY: cursor}

    def _items(self) -> int:
        if not hasattr(self.node, "__len__"):
            raise TypeError("the number of batches needs a node with __len__")
        return len(self.node)

    def remaining(self, cursor: Cursor) -> int:
        left = self._items() - (cursor[ItemBatcher.POSITION_KEY] if cursor else 0)
        return max(0, left // self.batch_size if self.drop_last else -(-left // self.batch_size))

    def num_batches(self) -> int:
        return self.remaining(None)

    def items_per_epoch(self) -> int:
        return self._items()

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        return {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.NODE_KEY: cursor,
            self.POSITION_KEY: self._delivered(cursor),
            self.BATCH_SIZE_KEY: self.batch_size,
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        if isinstance(state, Mapping) and self.NODE_KEY not in state and {"workers", "turn"} <= state.keys():
            n = state.get("num_workers")
            raise ValueError(
                f"this checkpoint was taken with worker_method='process' and num_workers={n}: the IterableDataset "
                "read as one stream per worker process; this loader reads it as one stream (worker_method='thread' "
                f"or num_workers=0), so the items differ: resume with worker_method='process' and num_workers={n}"
            )
        fields, epoch = StateFields.envelope(
            state, "node loader", (self.EPOCH_KEY, self.NODE_KEY), (self.VERSION_KEY, self.VERSION),
            (self.BATCH_SIZE_KEY,)
        )
        cursor = fields.get(self.NODE_KEY)
        position = fields.int(self.POSITION_KEY) if self.POSITION_KEY in fields else None  # None: an older state
        if cursor is None:
            if position:  # only a stream at its epoch's start has no node state
                raise fields.error(self.NODE_KEY, f"is the start of an epoch, but {self.POSITION_KEY}={position}")
            return epoch, None
        self.batcher.check_state(cursor, fields.where(self.NODE_KEY))
        cursor = dict(cursor)
        saved = self._delivered(cursor)
        if position is not None and position != saved:
            raise fields.error(self.POSITION_KEY, f"must be the node state's position {saved}")
        if fields.get(self.BATCH_SIZE_KEY) is not None:
            fields.int(self.BATCH_SIZE_KEY, low=1)
        self._check_ahead(cursor.get(ItemBatcher.AHEAD_KEY), cursor[ItemBatcher.POSITION_KEY],
                          fields.get(self.BATCH_SIZE_KEY))
        return epoch, cursor

    @staticmethod
    def _delivered(cursor: Cursor) -> int:
        """The items of the epoch delivered at ``cursor`` (0 at an epoch's start)."""
        if cursor is None or cursor.get(ItemBatcher.NEXT_EPOCH_KEY):
            return 0
        return cursor[ItemBatcher.POSITION_KEY]

    def _check_ahead(self, ahead: Any, position: int, batch_size: Any) -> None:
        """An ``in_order=False`` state's batches delivered ahead: later batch starts of this batch size."""
        if not ahead:
            return
        if batch_size != self.batch_size:
            raise ValueError(
                f"this checkpoint was taken with batches delivered out of order (in_order=False) and batch_size="
                f"{batch_size}: it resumes only with batch_size={batch_size} (this loader: {self.batch_size})"
            )
        if not isinstance(ahead, list) or any(
            isinstance(p, bool) or not isinstance(p, int) or p <= position or (p - position) % self.batch_size
            for p in ahead
        ):
            raise ValueError(f"invalid node state: {ItemBatcher.AHEAD_KEY}={ahead!r} must list later batch starts")
