"""Node mode: a torchdata node's items in its own order, batched (ItemBatcher), transformed and collated."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode

from torch_drt.loader._fetch import ItemBatchFetcher, fetch_stage
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.loader.state import require_mapping, state_int
from torch_drt.nodes.item_batcher import ItemBatcher
from torch_drt.nodes.ordered_map import OrderedMapper

__all__ = ["NodeMode"]


class NodeMode(LoaderMode):
    """A node's pipeline and checkpoint: ``{version, epoch, node_state, batch_size}``.

    ``node_state`` is the batcher's state after the last delivered batch (the node's own state inside it), or
    None at the start of an epoch, which starts from the node's own ``reset()`` (a ``CacheSampler`` continues
    its stream). Items have no dataset index: ``transform`` and ``return_indices`` get their positions in the
    node's epoch. The node decides order, shuffling and rank striding.
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = "epoch"
    NODE_KEY = "node_state"
    BATCH_SIZE_KEY = "batch_size"

    def __init__(self, loader: Any, node: BaseNode) -> None:
        self.node, self.batch_size, self.drop_last = node, loader.batch_size, loader.drop_last
        self.batcher = ItemBatcher(node, loader.batch_size, loader.drop_last)
        threads = loader.worker_method == "thread"
        fetcher = ItemBatchFetcher(
            loader.transform, loader.collate_fn, pin=loader.pin_memory and threads, seed=loader.seed
        )
        self.mapper = fetch_stage(loader, self.batcher, fetcher)

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
            self.BATCH_SIZE_KEY: self.batch_size,
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        state = require_mapping(state, "torch_drt node loader", (self.EPOCH_KEY, self.NODE_KEY))
        if self.VERSION_KEY in state:
            state_int(state, self.VERSION_KEY, low=self.VERSION, high=self.VERSION)
        epoch = state_int(state, self.EPOCH_KEY)
        cursor = state[self.NODE_KEY]
        if cursor is not None:
            cursor = dict(require_mapping(cursor, "node", (ItemBatcher.SOURCE_KEY, ItemBatcher.POSITION_KEY)))
            state_int(cursor, ItemBatcher.POSITION_KEY, what="node")
        return epoch, cursor
