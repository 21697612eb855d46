"""torchdata.nodes BaseNode subclasses: thin adapters over torch_drt's samplers, readers and workers.

The cache's nodes (``CacheSampler``, ``CacheReaderNode``) live in the cache's loader wing
(``torch_drt.cache.loader``); they are importable from here too, loaded on first use, so ``nodes/`` itself never
imports the cache.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torch_drt.nodes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
