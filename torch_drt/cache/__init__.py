"""The on-disk sample cache: write once, validate, read through memory maps, steer with one metadata table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_drt._lazy import lazy_names

if TYPE_CHECKING:  # the names below, visible to type checkers and IDEs
    from torch_drt.cache.config import ReaderConfig, ShardCompression, WriterConfig, WriterProfilerConfig
    from torch_drt.cache.dataset import CachedBatch, CachedDataset
    from torch_drt.cache.errors import CacheCorruptError, CacheSourcesError
    from torch_drt.cache.layout import CacheLayout
    from torch_drt.cache.reader import CacheReader
    from torch_drt.cache.records import (
        CachedSample,
        CacheInput,
        CacheSource,
        CacheWriteError,
        CacheWriteResult,
        CacheWriteSuccess,
    )
    from torch_drt.cache.runtime import DatasetRuntime
    from torch_drt.cache.validate import load_cache, open_cache, verify_checksums
    from torch_drt.locations.remote_config import RemoteConfig
    from torch_drt.sets.cache_set import CacheSet, CacheSetPart, is_cache_set, open_cache_set
    from torch_drt.sets.cache_set_publish import publish_cache_set

# loaded on first use, so importing one module of the cache (its errors, say) does not import all of it:
# the loaders' modules import loader/, which must not need the whole cache package to load
_LAZY = {
    "CacheCorruptError": "torch_drt.cache.errors",
    "CachedBatch": "torch_drt.cache.dataset",
    "CachedDataset": "torch_drt.cache.dataset",
    "CachedSample": "torch_drt.cache.records",
    "CacheInput": "torch_drt.cache.records",
    "CacheLayout": "torch_drt.cache.layout",
    "CacheReader": "torch_drt.cache.reader",
    "CacheSet": "torch_drt.sets.cache_set",
    "CacheSetPart": "torch_drt.sets.cache_set",
    "CacheSource": "torch_drt.cache.records",
    "CacheSourcesError": "torch_drt.cache.errors",
    "CacheWriteError": "torch_drt.cache.records",
    "CacheWriteResult": "torch_drt.cache.records",
    "CacheWriteSuccess": "torch_drt.cache.records",
    "DatasetRuntime": "torch_drt.cache.runtime",
    "is_cache_set": "torch_drt.sets.cache_set",
    "load_cache": "torch_drt.cache.validate",
    "open_cache": "torch_drt.cache.validate",
    "open_cache_set": "torch_drt.sets.cache_set",
    "publish_cache_set": "torch_drt.sets.cache_set_publish",
    "ReaderConfig": "torch_drt.cache.config",
    "RemoteConfig": "torch_drt.locations.remote_config",
    "ShardCompression": "torch_drt.cache.config",
    "verify_checksums": "torch_drt.cache.validate",
    "WriterConfig": "torch_drt.cache.config",
    "WriterProfilerConfig": "torch_drt.cache.config",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "CacheCorruptError",
    "CacheInput",
    "CacheLayout",
    "CacheReader",
    "CacheSet",
    "CacheSetPart",
    "CacheSource",
    "CacheSourcesError",
    "CacheWriteError",
    "CacheWriteResult",
    "CacheWriteSuccess",
    "CachedBatch",
    "CachedDataset",
    "CachedSample",
    "DatasetRuntime",
    "ReaderConfig",
    "RemoteConfig",
    "ShardCompression",
    "WriterConfig",
    "WriterProfilerConfig",
    "is_cache_set",
    "load_cache",
    "open_cache",
    "open_cache_set",
    "publish_cache_set",
    "verify_checksums",
]
