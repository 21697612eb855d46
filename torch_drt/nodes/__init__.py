"""torchdata.nodes BaseNode subclasses: thin adapters over torch_drt's samplers, readers and workers.

The cache's nodes (``CacheSampler``, ``CacheReaderNode``) live in the cache's loader wing
(``torch_drt.cache.loader``); they are importable from here too, loaded on first use, so ``nodes/`` itself never
imports the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_drt._lazy import lazy_names
from torch_drt.nodes.batch_plan import BatchPlan, BatchPlanner
from torch_drt.nodes.item_batcher import ItemBatch, ItemBatcher
from torch_drt.nodes.mixer import WeightedMixer
from torch_drt.nodes.ordered_map import OrderedMapper

if TYPE_CHECKING:  # the names below, visible to type checkers and IDEs
    from torch_drt.cache.loader.cache_reader import CacheReaderNode
    from torch_drt.cache.loader.cache_sampler import CacheSampler

_LAZY = {
    "CacheReaderNode": "torch_drt.cache.loader.cache_reader",
    "CacheSampler": "torch_drt.cache.loader.cache_sampler",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "BatchPlan",
    "BatchPlanner",
    "CacheReaderNode",
    "CacheSampler",
    "ItemBatch",
    "ItemBatcher",
    "OrderedMapper",
    "WeightedMixer",
]
