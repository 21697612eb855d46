"""torchdata.nodes BaseNode subclasses: thin adapters over torch_drt's samplers, readers and workers."""

from torch_drt.nodes.batch_plan import BatchPlan, BatchPlanner
from torch_drt.nodes.cache_reader import CacheReaderNode
from torch_drt.nodes.cache_sampler import CacheSampler
from torch_drt.nodes.item_batcher import ItemBatch, ItemBatcher
from torch_drt.nodes.mixer import WeightedMixer
from torch_drt.nodes.ordered_map import OrderedMapper

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
