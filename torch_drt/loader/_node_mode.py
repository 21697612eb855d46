"""StatefulDataLoader over a torchdata node: batches of the node's items, with the node's own order and state."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from torch_drt.loader._device import move_to_device
from torch_drt.loader._fetch import ItemBatchFetcher
from torch_drt.nodes.item_batcher import ItemBatcher
from torch_drt.nodes.ordered_map import OrderedMapper

if TYPE_CHECKING:
    from torch_drt.loader.dataloader import StatefulDataLoader

__all__ = ["NodeIterator", "setup_node_mode"]

NODE_KEY = "node_state"


def setup_node_mode(loader: StatefulDataLoader, node: Any) -> None:
    """Build the node pipeline: ItemBatcher -> OrderedMapper(transform + collate) on the loader's workers."""
    if loader.shuffle or loader.sampler is not None:
        raise ValueError("a node yields its own order: shuffle and sampler apply to map-style datasets")
    fetcher = ItemBatchFetcher(loader.transform, loader.collate_fn, pin=loader.pin_memory)
    loader._mapper = OrderedMapper(
        ItemBatcher(node, loader.batch_size, loader.drop_last),
        fetcher,
        num_workers=loader.num_workers,
        in_flight=loader.num_workers + loader.prefetch_depth,
        method=loader.worker_method,
        multiprocessing_context=loader.multiprocessing_context,
        timeout=loader.timeout,
    )


class NodeIterator:
    """One epoch of a node-backed loader; its state is the node's state after the last delivered batch."""

    def __init__(self, loader: StatefulDataLoader, generation: int) -> None:
        self._loader, self._generation = loader, generation
        self._lock = threading.Lock()
        self._done = False

    def __iter__(self) -> NodeIterator:
        return self

    def __next__(self) -> Any:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("another thread is advancing this loader iterator; use one thread per iterator")
        try:
            loader = self._loader
            if self._done:
                raise StopIteration
            if self._generation != loader._generation:
                raise RuntimeError("this iterator was superseded by a newer iter(loader)")
            try:
                batch, out = loader._mapper.next()
            except StopIteration:
                self._done = True
                loader._pos.epoch, loader._pos.active = loader._pos.epoch + 1, False
                loader._node_state = None  # the next epoch starts from the node's own reset
                raise
            finally:
                if not self._done:
                    loader._node_state = loader._mapper.state_dict()
            if loader._device is not None:
                out = move_to_device(out, loader._device)
            return (out, batch.indices) if loader.return_indices else out
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop this iterator."""
        self._done = True
        if self._generation == self._loader._generation:
            self._loader._pos.active = False


def node_iter(loader: StatefulDataLoader) -> NodeIterator:
    """Start (or resume) an epoch of a node-backed loader."""
    if loader._pending_state is not None:
        loader._pos.epoch = int(loader._pending_state["epoch"])
        state = loader._pending_state.get(NODE_KEY)
        loader._pending_state = None
    elif loader._pos.active:
        loader._pos.epoch += 1
        state = None
    else:
        state = loader._node_state
    loader._generation += 1
    loader._mapper.reset(state)
    loader._pos.active = True
    return NodeIterator(loader, loader._generation)


def node_state_dict(loader: StatefulDataLoader) -> dict[str, Any]:
    """The epoch and the node pipeline's delivered state (JSON-serialisable when the node's state is)."""
    if loader._pending_state is not None:
        return dict(loader._pending_state)
    return {
        loader.VERSION_KEY: loader.VERSION,
        loader.EPOCH_KEY: loader._pos.epoch,
        NODE_KEY: loader._node_state,
        loader.BATCH_SIZE_KEY: loader.batch_size,
    }
