"""The cache's loader wing: what builds loaders and nodes over a ``CachedDataset`` (it sits above ``loader/`` and
``nodes/``, which never import the cache).

``CachedDataset.to_torch_dataloader`` builds a ``CacheDataLoader`` (``torch_loader``): the rank's consumers
(``_consumer.RowFetcher``, which reads each consumer's ``torch_drt.cache.rows.RowStream``) in torch's order
(``_stream_mode``), with dataset-rt's options and worker budget (``_loader_options``, ``torch_drt._cpu_budget``) over an
exported metadata snapshot (``_snapshot``). ``CacheSampler`` and ``CacheReaderNode`` are the same reads as
torchdata nodes. Names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_drt._lazy import lazy_names

if TYPE_CHECKING:  # the names below, visible to type checkers and IDEs
    from torch_drt.cache.loader.cache_reader import CacheReaderNode
    from torch_drt.cache.loader.cache_sampler import CacheSampler
    from torch_drt.cache.loader.torch_loader import CacheDataLoader, to_torch_dataloader

_LAZY = {
    "CacheDataLoader": "torch_drt.cache.loader.torch_loader",
    "CacheReaderNode": "torch_drt.cache.loader.cache_reader",
    "CacheSampler": "torch_drt.cache.loader.cache_sampler",
    "to_torch_dataloader": "torch_drt.cache.loader.torch_loader",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = ["CacheDataLoader", "CacheReaderNode", "CacheSampler", "to_torch_dataloader"]
