"""The fetch stage of a loader: its ``BatchFetcher`` (or a node's fetch) on the loader's workers (``OrderedMapper``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from torch_drt._processes.transport import SharedMemoryTransport
from torch_drt.loader._fetch import BatchFetcher
from torch_drt.nodes.ordered_map import OrderedMapper


class _EarlyFetch(Protocol):
    """A fetch whose ``starts_early`` is true: its items start as its batches are submitted (``BatchFetcher``)."""

    def begin(self, plan: Any, /) -> None: ...

    def dropped(self) -> None: ...


def fetch_stage(loader: Any, source: Any, fetch: Callable[[Any], Any]) -> OrderedMapper:
    """``fetch`` over ``source`` on a ``StatefulDataLoader``'s workers, with its prefetch, order and time-out.

    Cheap batches run in the calling thread (``adaptive``) unless a ``worker_init_fn`` set the workers up.
    """
    early = getattr(fetch, "starts_early", False)  # its items start as its batches are submitted, not on the workers
    return OrderedMapper(
        source,
        fetch,
        num_workers=loader.num_workers,
        in_flight=loader.in_flight,
        method=loader.worker_method,
        multiprocessing_context=loader.multiprocessing_context,
        timeout=loader.timeout,
        adaptive=loader.worker_init_fn is None and not early,
        transport=SharedMemoryTransport(pin=loader.pin_memory),
        in_order=loader.in_order,
        on_submit=cast(_EarlyFetch, fetch).begin if early else None,
        on_drop=cast(_EarlyFetch, fetch).dropped if early else None,
    )


def item_threads(loader: Any) -> int:
    """Threads fetching items: ``num_workers x item_concurrency`` with thread workers, else ``item_concurrency``."""
    return max(1, loader.num_workers if loader.worker_method == "thread" else 1) * loader.item_concurrency


def pins_in_fetch(loader: Any) -> bool:
    """Whether the fetch pins its batches (``pin_memory``): in the thread that loads them, thread workers or 0
    workers (as torch's loader does); process workers' batches are pinned as the transport unpacks them."""
    return loader.pin_memory and (loader.worker_method == "thread" or loader.num_workers == 0)


def map_fetcher(loader: Any) -> BatchFetcher:
    """The ``BatchFetcher`` of a ``StatefulDataLoader`` over a map-style dataset."""
    return BatchFetcher(
        loader.dataset,
        loader.transform,
        loader._collate,
        loader.item_concurrency,
        pin=pins_in_fetch(loader),
        seed=loader.seed,
        item_threads=item_threads(loader),
    )
