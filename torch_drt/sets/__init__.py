"""Cache sets: one name for many part caches, opened as one dataset (``cache_set``), published in one step
(``cache_set_publish``); parts stay at the set's origin (``_set_origin``)."""

from torch_drt.sets.cache_set import CacheSet, CacheSetPart, is_cache_set, load_caches, open_cache_set, read_cache_set
from torch_drt.sets.cache_set_publish import publish_cache_set

__all__ = [
    "CacheSet",
    "CacheSetPart",
    "is_cache_set",
    "load_caches",
    "open_cache_set",
    "publish_cache_set",
    "read_cache_set",
]
