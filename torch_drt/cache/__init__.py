"""The on-disk sample cache: write once, validate, read through memory maps, steer with one metadata table."""

from torch_drt.cache.cache_set import CacheSet, CacheSetPart, is_cache_set, open_cache_set
from torch_drt.cache.cache_set_publish import publish_cache_set
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
    SizedTorchIterableDataset,
)
from torch_drt.cache.remote_config import RemoteConfig
from torch_drt.cache.runtime import DatasetRuntime
from torch_drt.cache.validate import load_cache, open_cache, verify_checksums

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
    "SizedTorchIterableDataset",
    "WriterConfig",
    "WriterProfilerConfig",
    "is_cache_set",
    "load_cache",
    "open_cache",
    "open_cache_set",
    "publish_cache_set",
    "verify_checksums",
]
