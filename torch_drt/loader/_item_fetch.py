"""The fetch stage of a node or iterable loader: a node's ``ItemBatch`` -> transform, collate, pin.

Each batch is transformed and collated inside its batch scope (``torch_drt.random``), keyed by the items' numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch_drt.describe import described
from torch_drt.loader._collate import pin_batch
from torch_drt.loader.iterator import Fetched
from torch_drt.loader.transform_rule import transform_hook
from torch_drt.nodes.item_batcher import ItemBatch
from torch_drt.random import enter_batch, exit_batch, map_items
from torch_drt.sampling.stride import stride_range


class ItemBatchFetcher:
    """Turns an ``ItemBatch`` from a node into ``(batch, numbers, False)`` (``Fetched``): transform, collate, pin.

    A node's items have no dataset index: item ``p`` of the epoch is numbered ``p * stride + offset`` (a node:
    ``p``; an ``IterableDataset`` on rank r of W: ``p * W + r``). The number is what ``transform(number, item)``
    gets, what ``return_indices`` yields and what keys the item's random generator.

    Args:
        transform: ``transform(number, item) -> item`` or None.
        collate_fn: ``collate_fn(items) -> batch``.
        pin: pin the batch's tensors (thread workers; process workers pin when unpacking).
        seed: the loader's seed, keying the items' random generators.
        stride: numbers advance by this much per position.
        offset: the number of position 0.
    """

    def __init__(
        self,
        transform: Callable[[int, Any], Any] | None,
        collate_fn: Callable[[list[Any]], Any],
        pin: bool = False,
        seed: int = 0,
        stride: int = 1,
        offset: int = 0,
    ) -> None:
        self.transform, self.collate_fn, self.pin, self.seed = transform_hook(transform), collate_fn, pin, seed
        self.stride, self.offset = stride, offset

    def __repr__(self) -> str:
        return described(self, transform=self.transform, collate_fn=self.collate_fn)

    def numbers(self, positions: range) -> Sequence[int]:
        """The items' numbers (see the class docstring)."""
        if self.stride == 1 and self.offset == 0:
            return positions
        count = positions.stop - positions.start
        return stride_range(positions.start, count, rank=self.offset, world_size=self.stride)

    def apply(self, epoch: int, numbers: Sequence[int], items: list[Any]) -> Any:
        """Transform and collate ``items`` in their batch scope."""
        token = enter_batch(self.seed, epoch, numbers, numbers)
        try:
            if self.transform is not None:
                items = map_items(self.transform, numbers, items, numbers)
            out = self.collate_fn(items)
        finally:
            exit_batch(token)
        return pin_batch(out) if self.pin else out

    def __call__(self, batch: ItemBatch) -> Fetched:
        numbers = self.numbers(batch.positions)
        return self.apply(batch.epoch, numbers, batch.items), list(numbers), False
